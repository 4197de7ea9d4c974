/**
 * The largest non-streamed answer read whole for its usage. An isolate's memory (128 MB) is shared
 * by every request it serves: an embeddings answer for a large batch (tens of MB) held whole, a few
 * at once, would exceed it and reset the isolate with every request in it. A chat completion is a
 * few KB; what is larger, or does not say its size, passes through with its usage read as it goes.
 */
export const WHOLE_READ_MAX_BYTES = 1024 * 1024;

/**
 * Whether an answer is small enough to read whole, by what its headers say. A compressed one's
 * content-length is its compressed size, while the runtime hands over the bytes decoded (gzip,
 * br): 1 MiB of gzip can be a thousand times that, so its size is not known.
 */
export function heldWhole(headers: Headers): boolean {
  const length = statedLength(headers);
  return length !== null && length <= WHOLE_READ_MAX_BYTES;
}

/** The length of the bytes the runtime hands over, when the headers say it: not a compressed answer's. */
export function statedLength(headers: Headers): number | null {
  const length = headers.get("content-length");
  return length !== null && headers.get("content-encoding") === null ? Number(length) : null;
}
