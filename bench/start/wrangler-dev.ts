/**
 * The command line `npm start` gives `wrangler dev`. The keys go in as --vars: wrangler shows
 * such vars as hidden, lets them override .dev.vars, and nothing is written to disk. (A local
 * user who can list processes can read them there; before keys, such a user needed none.)
 */
import type { GatewayConfig } from "../../src/config/schema.ts";
import type { DevKeys } from "./api-key.ts";

export interface WranglerDev {
  host: string;
  port: number;
  /** The env vars the config reads the client (master), admin and register keys from. */
  auth: Pick<GatewayConfig["auth"], "masterKeyEnv" | "adminKeyEnv" | "registerKeyEnv">;
  keys: DevKeys;
  /** Where the Durable Objects keep their state for this run. */
  persistTo: string;
  /** A config to serve instead of wrangler.toml's (its fleet moved); null to serve the file's. */
  config: GatewayConfig | null;
}

export function wranglerDevArgs(o: WranglerDev): string[] {
  const vars = [`${o.auth.masterKeyEnv}:${o.keys.api}`, `${o.auth.adminKeyEnv}:${o.keys.admin}`, `${o.auth.registerKeyEnv}:${o.keys.register}`];
  if (o.config) vars.push(`KVGATE_CONFIG:${JSON.stringify(o.config)}`);
  return [
    "dev",
    "--ip", o.host,
    "--port", String(o.port),
    "--persist-to", o.persistTo,
    // "log": the Worker's console lines (its request and event lines) show; wrangler's info lines too.
    "--log-level", "log",
    "--show-interactive-dev-session=false",
    ...vars.flatMap((v) => ["--var", v]),
  ];
}
