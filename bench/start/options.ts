/**
 * Where `npm start` runs. The defaults are the ports the dev config in wrangler.toml names.
 * KVGATE_PORT and KVGATE_FLEET_PORT move them (0: free ports the OS picks), so a second copy —
 * a test, another checkout — runs beside a developer's own without taking its ports.
 */
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

export function startOptions(env: Readonly<Record<string, string | undefined>>): StartOptions {
  return { port: portFrom(env, "KVGATE_PORT", DEFAULT_PORT), fleetPort: portFrom(env, "KVGATE_FLEET_PORT", DEFAULT_FLEET_PORT) };
}

function portFrom(env: Readonly<Record<string, string | undefined>>, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new Error(`${name} must be a port (0–65535, 0 for a free one), not "${raw}"`);
  return port;
}

/** The simulated workers' URLs for a fleet starting at `basePort`, as startFleet numbers them. */
export function fleetUrls(basePort: number, workers: number = FLEET_WORKERS): string[] {
  return Array.from({ length: workers }, (_, i) => `http://${HOST}:${basePort + i}`);
}
