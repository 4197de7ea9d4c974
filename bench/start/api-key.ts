/**
 * `npm start`'s keys: new ones each run, each printed once, on a line of its own, as
 * `<VARIABLE>=<key>`; scripts that start kvgate read them from there. The client key is what
 * every /v1 request needs; the admin key is for the admin API and `npx kvgate`; the register key
 * is for GPU servers that register themselves. The names printed stay these; the Worker reads the
 * keys from the vars the config names (auth.masterKeyEnv, adminKeyEnv, registerKeyEnv).
 */
import { newMasterKey } from "../harness/master-key.ts";

export const KEY_VARS = { api: "KVGATE_API_KEY", admin: "KVGATE_ADMIN_KEY", register: "KVGATE_REGISTER_KEY" } as const;

export type KeyRole = keyof typeof KEY_VARS;
export type DevKeys = Readonly<Record<KeyRole, string>>;

export function newDevKeys(): DevKeys {
  return { api: newMasterKey("dev"), admin: newMasterKey("dev"), register: newMasterKey("dev") };
}

export function keyLine(role: KeyRole, key: string): string {
  return `${KEY_VARS[role]}=${key}`;
}

/** A key in npm start's output, read as a script would: the line that is exactly VARIABLE=<key>. */
export function readKey(output: string, role: KeyRole): string | null {
  return new RegExp(`^${KEY_VARS[role]}=(\\S+)$`, "m").exec(output)?.[1] ?? null;
}
