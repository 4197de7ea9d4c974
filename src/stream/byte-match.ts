/** Byte comparisons with no copy (bytes.ts holds the operations that copy). */

/** Whether `bytes` holds the first `length` bytes of `needle` (all of it unless said) at `at`. */
export function holdsAt(bytes: Uint8Array, at: number, needle: Uint8Array, length = needle.length): boolean {
  if (at + length > bytes.length) return false;
  for (let k = 0; k < length; k++) if (bytes[at + k] !== needle[k]) return false;
  return true;
}
