import { join } from "../stream/bytes.ts";

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
  const parts: Uint8Array[] = [];
  let size = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), maxMs)));
  try {
    while (size < maxBytes) {
      const step = await Promise.race([reader.read(), expired]);
      if (step === null || step.done) break;
      parts.push(step.value);
      size += step.value.length;
    }
  } catch {
    // The body failed part-way: what arrived is what there is to say.
  } finally {
    clearTimeout(timer);
    reader.cancel().catch(() => {});
  }
  const bytes = join(parts);
  return utf8.decode(bytes.length > maxBytes ? bytes.subarray(0, maxBytes) : bytes);
}
