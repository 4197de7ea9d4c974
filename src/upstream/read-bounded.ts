import { GatheredBytes } from "../stream/gathered-bytes.ts";

/** An error body is a sentence of JSON: this much of it is plenty, and the rest is never read. */
export const ERROR_BODY_MAX_BYTES = 8 * 1024;
export const ERROR_BODY_MAX_MS = 2000;

const utf8 = new TextDecoder("utf-8");

/**
 * Reads at most `maxBytes` of a body, for at most `maxMs`, then cancels it: a 300 MiB error page
 * or a body that drips forever costs the gateway a few KiB and a bounded wait. What was read by
 * then is returned as text (a cut UTF-8 sequence becomes U+FFFD).
 */
export async function readBounded(body: ReadableStream<Uint8Array> | null, maxBytes = ERROR_BODY_MAX_BYTES, maxMs = ERROR_BODY_MAX_MS): Promise<string> {
  if (!body) return "";
  const reader = body.getReader();
  // Copied, not kept by reference: an upstream that drips a byte per chunk would otherwise hold a
  // runtime store of 4 KiB for each byte, 32 MiB for the 8 KiB read (GatheredBytes).
  const read = new GatheredBytes(maxBytes);
  // The time bound cancels the read it ends. Not a race of each read against one promise that
  // settles at maxMs: each race leaves a reaction on it holding its result, every chunk read.
  const timer = setTimeout(() => void reader.cancel().catch(() => {}), maxMs);
  try {
    while (read.length < maxBytes) {
      const step = await reader.read();
      if (step.done) break;
      read.push(step.value);
    }
  } catch {
    // The body failed part-way: what arrived is what there is to say.
  } finally {
    clearTimeout(timer);
    reader.cancel().catch(() => {});
  }
  return utf8.decode(read.bytes());
}
