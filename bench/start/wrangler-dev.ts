/**
 * The command line `npm start` gives `wrangler dev`. It holds no key: the keys are in the file
 * `--env-file` names (bench/start/keys-file.ts), which wrangler reads in place of .dev.vars, so a
 * developer's .dev.vars (for `npm run dev`) does not override the keys npm start printed.
 */
import type { GatewayConfig } from "../../src/config/schema.ts";

export interface WranglerDev {
  host: string;
  port: number;
  /** The .env file with the keys (keys-file.ts). */
  envFile: string;
  /** Where the Durable Objects keep their state for this run. */
  persistTo: string;
  /** A config to serve instead of wrangler.toml's (its fleet moved); null to serve the file's. It holds no secret. */
  config: GatewayConfig | null;
}

export function wranglerDevArgs(o: WranglerDev): string[] {
  return [
    "dev",
    "--ip", o.host,
    "--port", String(o.port),
    "--persist-to", o.persistTo,
    "--env-file", o.envFile,
    // "log": the Worker's console lines (its request and event lines) show; wrangler's info lines too.
    "--log-level", "log",
    "--show-interactive-dev-session=false",
    ...(o.config ? ["--var", `KVGATE_CONFIG:${JSON.stringify(o.config)}`] : []),
  ];
}

/**
 * wrangler's own settings for how it reads the file, whatever the shell has: it reads the file
 * (CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV=false would skip it, and the printed keys would not work)
 * and adds no other variable of the shell to the Worker's env (CLOUDFLARE_INCLUDE_PROCESS_ENV).
 */
export const WRANGLER_ENV_FILE_SETTINGS = { CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: "true", CLOUDFLARE_INCLUDE_PROCESS_ENV: "false" } as const;
