const OFFSET = 0xcbf29ce484222325n;
const PRIME = 0x100000001b3n;
const MASK = (1n << 64n) - 1n;
const utf8 = new TextEncoder();

/**
 * FNV-1a, 64 bits, over the text's UTF-8 bytes, as 16 hex digits: a stable name for a piece of
 * config (a group's version, a backend's storage key). Not for anything per request: it runs once
 * per group or backend, so BigInt's cost does not matter and its clarity does.
 */
export function fnv1a64(text: string): string {
  let h = OFFSET;
  for (const byte of utf8.encode(text)) h = ((h ^ BigInt(byte)) * PRIME) & MASK;
  return h.toString(16).padStart(16, "0");
}
