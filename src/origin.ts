/**
 * `scheme://host[:port]` exactly, as a browser sends it in Origin: no path, no wildcard, no
 * default port, the host in lower case. One rule for the config's CORS origins and a key's.
 */
export function isExactOrigin(text: string): boolean {
  if (!/^https?:\/\/[^/?#*]+$/i.test(text)) return false;
  try {
    return new URL(text).origin === text;
  } catch {
    return false;
  }
}

export const EXACT_ORIGIN = "must be an exact origin, scheme://host[:port] (no path, no *)";
