/**
 * A virtual key: "sk-kvg-" and 40 base62 characters (238 bits from crypto.getRandomValues). The
 * marker lets the gateway refuse anything else without asking the tenants object; the first 12
 * characters are the key's visible prefix.
 */
export const KEY_MARKER = "sk-kvg-";
const BODY_CHARS = 40;
export const PREFIX_CHARS = 12;
const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const SHAPE = /^sk-kvg-[0-9A-Za-z]{40}$/;

export function looksLikeVirtualKey(text: string): boolean {
  return SHAPE.test(text);
}

export function newKey(): string {
  // 62 × 4 = 248 ≤ 256: bytes of 248 and above are drawn again, so every character is equally likely.
  let out = KEY_MARKER;
  while (out.length < KEY_MARKER.length + BODY_CHARS) {
    for (const b of crypto.getRandomValues(new Uint8Array(48))) {
      if (b < 248 && out.length < KEY_MARKER.length + BODY_CHARS) out += ALPHABET[b % 62];
    }
  }
  return out;
}

export function prefixOf(key: string): string {
  return key.slice(0, PREFIX_CHARS);
}

const ANY_KEY = /sk-kvg-[0-9A-Za-z]{40}/g;

/**
 * `text` with every virtual key in it cut to its prefix and "…": for what a log keeps of what a
 * client sent (a key pasted where the model or a path goes). Without the marker, as nearly every
 * text is, it is returned as it is, unsearched.
 */
export function maskedKeys(text: string): string {
  return text.includes(KEY_MARKER) ? text.replace(ANY_KEY, (key) => `${prefixOf(key)}…`) : text;
}

const encoder = new TextEncoder();

/** Lowercase hex SHA-256 of the key: all that is stored of it, and what the gateway looks it up by. */
export async function keyHash(key: string): Promise<string> {
  return keyHashOf(new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(key))));
}

/** keyHash of a key whose SHA-256 is `digest`: for a caller that needs the digest's bytes too. */
export function keyHashOf(digest: Uint8Array): string {
  let hex = "";
  for (const b of digest) hex += b.toString(16).padStart(2, "0");
  return hex;
}
