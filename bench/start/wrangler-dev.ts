/**
 * The command line `npm start` gives `wrangler dev`. The key goes in as a --var: wrangler shows
 * such vars as hidden, lets them override .dev.vars, and nothing is written to disk. (A local
 * user who can list processes can read it there; before keys, such a user needed none.)
 */
export interface WranglerDev {
  host: string;
  port: number;
  /** The env var the config reads the master key from (auth.masterKeyEnv). */
  masterKeyEnv: string;
  key: string;
}

export function wranglerDevArgs(o: WranglerDev): string[] {
  return [
    "dev",
    "--ip", o.host,
    "--port", String(o.port),
    "--log-level", "warn",
    "--show-interactive-dev-session=false",
    "--var", `${o.masterKeyEnv}:${o.key}`,
  ];
}
