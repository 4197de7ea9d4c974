/**
 * `npm start`'s key: a new one each run, printed once, on a line of its own, as
 * `KVGATE_API_KEY=<key>`; scripts that start kvgate read it from there.
 */
import { newMasterKey } from "../harness/master-key.ts";

export const API_KEY_VAR = "KVGATE_API_KEY";

export const newApiKey = (): string => newMasterKey("dev");

export function apiKeyLine(key: string): string {
  return `${API_KEY_VAR}=${key}`;
}

/** The key in npm start's output, read as a script would: the line that is exactly KVGATE_API_KEY=<key>. */
export function readApiKey(output: string): string | null {
  return new RegExp(`^${API_KEY_VAR}=(\\S+)$`, "m").exec(output)?.[1] ?? null;
}
