/**
 * A PATCH's fields over what they change, as RFC 7396 merges: a plain object (a group's
 * `failover`, `breaker`, `feedback`, `pricing`) merges field by field, so a patch naming one of
 * its fields keeps the others as they are; `null` takes the field out (an optional setting is then
 * unset, one with a default back at it); an array or a scalar replaces. The caller checks the
 * result whole. No setting of the config's schema takes null as a value.
 */
export function mergePatch(current: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return patch;
  const base = isRecord(current) ? current : {};
  const keys = [...new Set([...Object.keys(base), ...Object.keys(patch)])].filter((k) => !Object.hasOwn(patch, k) || patch[k] !== null);
  // Built with fromEntries: a key named "__proto__" stays a key (and is refused as unknown), never the prototype.
  return Object.fromEntries(keys.map((k) => [k, Object.hasOwn(patch, k) ? mergePatch(Object.hasOwn(base, k) ? base[k] : undefined, patch[k]) : base[k]]));
}

/**
 * One level of mergePatch: the patch's fields replace the current ones whole, `null` taking one
 * out. A deployment's one object, headersFromEnv, is a list of headers rather than settings.
 */
export function shallowPatch(current: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out = Object.fromEntries(Object.entries(current).filter(([k]) => !Object.hasOwn(patch, k)));
  for (const [k, v] of Object.entries(patch)) if (v !== null) out[k] = v;
  return out;
}

/**
 * The patch with each field it takes out (null, at any depth) left in as absent (undefined): what
 * a strict schema checks the names of, so that a misspelled field taken out is refused as
 * unknown, not taken as a change of nothing.
 */
export function nullsAsAbsent(patch: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(patch).map(([k, v]) => [k, v === null ? undefined : isRecord(v) ? nullsAsAbsent(v) : v]));
}

/** A JSON object: not null, not an array. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
