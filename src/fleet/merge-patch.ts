/**
 * A PATCH's fields over what they change: a plain object (a group's `failover`, `breaker`,
 * `feedback`, `pricing`) merges field by field, so a patch naming one of its fields keeps the
 * others as they are; an array or a scalar replaces. The caller checks the result whole.
 */
export function mergePatch(current: unknown, patch: unknown): unknown {
  if (!isRecord(current) || !isRecord(patch)) return patch;
  const keys = new Set([...Object.keys(current), ...Object.keys(patch)]);
  // Built with fromEntries: a key named "__proto__" stays a key (and is refused as unknown), never the prototype.
  return Object.fromEntries([...keys].map((k) => [k, Object.hasOwn(patch, k) ? mergePatch(Object.hasOwn(current, k) ? current[k] : undefined, patch[k]) : current[k]]));
}

/** A JSON object: not null, not an array. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
