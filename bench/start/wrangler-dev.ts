/**
 * The command line bench/start.ts gives `npm start`'s gateway (dev-worker.ts, wrangler's dev server
 * with no debugger). It holds no key: the keys are in the file `--env-file` names
 * (bench/start/keys-file.ts), which wrangler reads in place of .dev.vars, so a developer's
 * .dev.vars (for `npm run dev`) does not override the keys npm start printed.
 */
import type { GatewayConfig } from "../../src/config/schema.ts";
import { parseFlags } from "../harness/argv.ts";

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
    "--ip", o.host,
    "--port", String(o.port),
    "--persist-to", o.persistTo,
    "--env-file", o.envFile,
    ...(o.config ? ["--config", JSON.stringify(o.config)] : []),
  ];
}

/** What wranglerDevArgs wrote, read back by dev-worker.ts; only start.ts writes it, so it is not checked again. */
export function readWranglerDevArgs(argv: readonly string[]): WranglerDev {
  const f = parseFlags(
    argv,
    { ip: { type: "string" }, port: { type: "string" }, "persist-to": { type: "string" }, "env-file": { type: "string" }, config: { type: "string" } },
    "bench/start/wrangler-dev.ts",
  );
  if (f.ip === undefined || f.port === undefined || f["persist-to"] === undefined || f["env-file"] === undefined) throw new Error("--ip, --port, --persist-to and --env-file are needed");
  return {
    host: f.ip,
    port: Number(f.port),
    persistTo: f["persist-to"],
    envFile: f["env-file"],
    config: f.config === undefined ? null : (JSON.parse(f.config) as GatewayConfig),
  };
}

/**
 * wrangler's own settings for how it reads the file, whatever the shell has: it reads the file
 * (CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV=false would skip it, and the printed keys would not work)
 * and adds no other variable of the shell to the Worker's env (CLOUDFLARE_INCLUDE_PROCESS_ENV).
 */
export const WRANGLER_ENV_FILE_SETTINGS = { CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: "true", CLOUDFLARE_INCLUDE_PROCESS_ENV: "false" } as const;
