import { fnv1a64 } from "../fnv64.ts";

/**
 * A group's version: the hash of everything it resolved to, settings and deployments, keys in a
 * fixed order. The Worker sends it on every route call and the group's Durable Object routes with
 * the settings it names, so an object and a Worker that were deployed with different configs can
 * never act on each other's backends. Any change makes a new version, even one routing ignores
 * (an alias, a hook): that costs the object one more round trip to learn it, never a wrong pick.
 */
export function groupVersion(group: object): string {
  return fnv1a64(canonicalJson(group));
}

/** JSON with every object's keys sorted, so equal values always give equal text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return v;
    const sorted: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) sorted[k] = (v as Record<string, unknown>)[k];
    return sorted;
  });
}
