/**
 * The command line `npm start` gives `wrangler dev`. The key goes in as a --var: wrangler shows
 * such vars as hidden, lets them override .dev.vars, and nothing is written to disk. (A local
 * user who can list processes can read it there; before keys, such a user needed none.)
 */
import type { GatewayConfig } from "../../src/config/schema.ts";

export interface WranglerDev {
  host: string;
  port: number;
  /** The env var the config reads the master key from (auth.masterKeyEnv). */
  masterKeyEnv: string;
  key: string;
  /** Where the Durable Objects keep their state for this run. */
  persistTo: string;
  /** A config to serve instead of wrangler.toml's (its fleet moved); null to serve the file's. */
  config: GatewayConfig | null;
}

export function wranglerDevArgs(o: WranglerDev): string[] {
  const vars = [`${o.masterKeyEnv}:${o.key}`];
  if (o.config) vars.push(`KVGATE_CONFIG:${JSON.stringify(o.config)}`);
  return [
    "dev",
    "--ip", o.host,
    "--port", String(o.port),
    "--persist-to", o.persistTo,
    "--log-level", "warn",
    "--show-interactive-dev-session=false",
    ...vars.flatMap((v) => ["--var", v]),
  ];
}
