/**
 * `npm start`'s keys on their way to wrangler's dev server (dev-worker.ts): a .env file
 * (`--env-file`) in a folder of its own that only this user can read (0700, the file 0600), removed
 * when npm start stops. On the command line (`--var`) any local user could read them with `ps` or
 * /proc/PID/cmdline, and use them on 127.0.0.1; through a debugger (`wrangler dev`'s, which
 * dev-worker.ts keeps closed), by evaluating env.KVGATE_ADMIN_KEY. wrangler reads the file again
 * when it reloads, so it stays while the dev server runs.
 */
import { rmSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { GatewayConfig } from "../../src/config/schema.ts";
import type { DevKeys } from "./api-key.ts";

/** The env vars the config reads the client (master), admin and register keys from. */
export type KeyNames = Pick<GatewayConfig["auth"], "masterKeyEnv" | "adminKeyEnv" | "registerKeyEnv">;

/**
 * The file's text, NAME=key a line. The names are env var names (the config's schema holds them to
 * that) and the keys hex after a fixed prefix, so nothing needs quoting and nothing expands.
 */
export function keysEnvText(names: KeyNames, keys: DevKeys): string {
  return `${names.masterKeyEnv}=${keys.api}\n${names.adminKeyEnv}=${keys.admin}\n${names.registerKeyEnv}=${keys.register}\n`;
}

export interface KeysFile {
  path: string;
  /**
   * Removes the file and its folder; safe to call twice. Synchronous, so that a process 'exit'
   * handler, where nothing asynchronous runs, can call it too.
   */
  remove(): void;
}

export async function writeKeysFile(names: KeyNames, keys: DevKeys): Promise<KeysFile> {
  // mkdtemp makes the folder 0700; the file is made 0600 (the mode applies as it is created).
  const dir = await mkdtemp(join(tmpdir(), "kvgate-dev-keys-"));
  const path = join(dir, "keys.env");
  await writeFile(path, keysEnvText(names, keys), { mode: 0o600, flag: "wx" });
  return { path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
