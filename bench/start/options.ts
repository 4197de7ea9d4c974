/** Where `npm start` runs: the ports the dev config in wrangler.toml names. */
export const HOST = "127.0.0.1";
export const MODEL = "kvgate-sim";
export const FLEET_WORKERS = 4;
export const DEFAULT_PORT = 8787;
export const DEFAULT_FLEET_PORT = 9001;

/** The simulated workers' URLs for a fleet starting at `basePort`, as startFleet numbers them. */
export function fleetUrls(basePort: number, workers: number = FLEET_WORKERS): string[] {
  return Array.from({ length: workers }, (_, i) => `http://${HOST}:${basePort + i}`);
}
