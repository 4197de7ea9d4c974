/** One array holding the parts in order; a few, named: a list of parts goes to join (a call takes only so many arguments). */
export function concat(...parts: Uint8Array[]): Uint8Array {
  return join(parts);
}

/** One array holding the parts in order; for a list too long to spread into a call's arguments. */
export function join(parts: readonly Uint8Array[]): Uint8Array {
  let n = 0;
  for (const part of parts) n += part.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const part of parts) {
    out.set(part, o);
    o += part.length;
  }
  return out;
}
