/**
 * Settings kvgate had and dropped. The schema is strict, so one left in a config is refused
 * anyway; this says why it went and what to do instead, where the schema could only say
 * "unknown key".
 */
const REMOVED: readonly { path: readonly string[]; instead: string }[] = [
  {
    path: ["auth", "devOpenOnLoopback"],
    instead:
      "was removed: it let requests in without a key when their Host header named a loopback host, which any client can send. " +
      "Every /v1 request now needs the master key. Delete the setting; `npm start` makes a key each run and prints it as " +
      "KVGATE_API_KEY=<key>, and `wrangler dev` reads KVGATE_MASTER_KEY from .dev.vars",
  },
];

/** What to tell the operator about the first removed setting the raw config holds, if any. */
export function removedSetting(raw: unknown): string | null {
  for (const r of REMOVED) if (holds(raw, r.path)) return `${r.path.join(".")} ${r.instead}`;
  return null;
}

function holds(value: unknown, path: readonly string[]): boolean {
  let at = value;
  for (const key of path) {
    if (typeof at !== "object" || at === null || !Object.hasOwn(at, key)) return false;
    at = Reflect.get(at, key);
  }
  return true;
}
