/** A body's first bytes, and when they came (the `now` clock's time). */
export interface FirstBytes {
  chunk: Uint8Array;
  at: number;
}

/**
 * Reads a body up to its first bytes, skipping empty chunks; null when it ends with none. The
 * reader is released: the rest of the body stays in it for the relay.
 */
export async function readFirstBytes(body: ReadableStream<Uint8Array>, now: () => number): Promise<FirstBytes | null> {
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return null;
      if (value.byteLength > 0) return { chunk: value, at: now() };
    }
  } finally {
    reader.releaseLock();
  }
}
