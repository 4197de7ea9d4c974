/**
 * Where `npm start` runs. The defaults are the ports the dev config in wrangler.toml names.
 * Flags (`npm start -- --port 9000`) or the environment move them (0: free ports the OS picks), so
 * a second copy — a test, another checkout — runs beside a developer's own without taking its ports.
 */
import { fetchBlockedPort } from "../../src/fetch-blocked-ports.ts";
import { parseFlags } from "../harness/argv.ts";

export const HOST = "127.0.0.1";
export const MODEL = "kvgate-sim";
export const FLEET_WORKERS = 4;
export const DEFAULT_PORT = 8787;
export const DEFAULT_FLEET_PORT = 9001;

export interface StartOptions {
  /** The gateway's port; 0 for a free one. */
  port: number;
  /** The first simulated worker's port (the others follow it); 0 for free ones. */
  fleetPort: number;
}

type Env = Readonly<Record<string, string | undefined>>;

/** Where each port comes from, first found first: the flag, then the environment. */
const SOURCES = {
  // KVGATE_PORT, kvgate's own name, wins over PORT, which a shell may set for something else.
  port: { flag: "--port", env: ["KVGATE_PORT", "PORT"] },
  fleetPort: { flag: "--fleet-port", env: ["KVGATE_FLEET_PORT"] },
} as const;

export function startUsage(): string {
  return `usage: npm start -- [--port N] [--fleet-port N]

Starts the simulated GPU fleet (${FLEET_WORKERS} workers) and the kvgate gateway in front of it.

  --port N        the gateway's port; env PORT or KVGATE_PORT; default ${DEFAULT_PORT}
  --fleet-port N  the fleet's first port (the others follow it); env KVGATE_FLEET_PORT;
                  default ${DEFAULT_FLEET_PORT} (${fleetRange(DEFAULT_FLEET_PORT)})
  --help          this text

0 picks free ports. A flag wins over the environment.`;
}

export function wantsHelp(argv: readonly string[]): boolean {
  return argv.includes("--help") || argv.includes("-h");
}

/** The ports from `argv` (npm start's arguments) and `env`; throws a one-line reason on a bad one. */
export function startOptions(env: Env, argv: readonly string[] = []): StartOptions {
  const flags = parseFlags(
    argv,
    { port: { type: "string" }, "fleet-port": { type: "string" }, help: { type: "boolean", short: "h" } },
    "npm start -- --help lists the flags; npm needs the -- before them",
  );
  const port = portFrom("port", flags.port, env, DEFAULT_PORT);
  const fleetPort = portFrom("fleetPort", flags["fleet-port"], env, DEFAULT_FLEET_PORT);
  const lastFirst = 65_535 - (FLEET_WORKERS - 1);
  if (fleetPort > lastFirst) throw new Error(`the fleet's first port must leave room for its ${FLEET_WORKERS} workers: at most ${lastFirst}, not ${fleetPort}`);
  // wrangler would serve on it and curl reach it, but npm start's own readiness check (fetch) never
  // would, nor the CLI or the dashboard in a browser: it would fail 60 s later, naming no cause.
  const blocked = fetchBlockedPort(port);
  if (blocked !== null) throw new Error(`${blocked}; pick another with --port or PORT`);
  if (port !== 0 && fleetPort !== 0 && port >= fleetPort && port < fleetPort + FLEET_WORKERS) {
    throw new Error(`port ${port} is one of the fleet's (${fleetRange(fleetPort)}); pick another with --port or --fleet-port`);
  }
  return { port, fleetPort };
}

function portFrom(option: keyof StartOptions, flagValue: string | undefined, env: Env, fallback: number): number {
  const { flag, env: names } = SOURCES[option];
  const name = flagValue !== undefined ? flag : names.find((n) => env[n] !== undefined && env[n] !== "");
  if (name === undefined) return fallback;
  const raw = flagValue ?? (env[name] as string);
  const port = Number(raw);
  if (!/^\d+$/.test(raw) || port > 65_535) throw new Error(`${name} must be a port (0–65535, 0 for a free one), not "${raw}"`);
  return port;
}

/** The simulated workers' URLs for a fleet starting at `basePort`, as startFleet numbers them. */
export function fleetUrls(basePort: number, workers: number = FLEET_WORKERS): string[] {
  return Array.from({ length: workers }, (_, i) => `http://${HOST}:${basePort + i}`);
}

/** "9001–9004": the ports a fleet starting at `basePort` takes. */
export function fleetRange(basePort: number): string {
  return `${basePort}–${basePort + FLEET_WORKERS - 1}`;
}
