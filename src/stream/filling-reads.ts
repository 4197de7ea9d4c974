/** The most one filling read takes: 16 KiB, a few hundred events of an LLM stream. */
export const FILL_READ_BYTES = 16 * 1024;

/** Reads of a body that each take everything it has queued, up to FILL_READ_BYTES. */
export interface FillingReads {
  readonly reader: ReadableStreamDefaultReader<Uint8Array> | ReadableStreamBYOBReader;
  /** Resolves as soon as any bytes are there, with all that are, as a plain read does. */
  read(): Promise<ReadableStreamReadResult<Uint8Array>>;
  /**
   * The values are views of one buffer that the next read fills again: whoever keeps bytes past
   * it takes a copy. False where each value is a chunk of its own.
   */
  readonly reused: boolean;
}

/**
 * Reads that fill one buffer from everything the body has queued (a BYOB reader: workerd's fetch
 * bodies and their tee branches are byte streams), or a chunk at a time where the body is no byte
 * stream (one made in JavaScript, as Node's tests make them). A read never waits for more than the
 * first byte, so nothing is held back; but where chunks arrive faster than JavaScript takes them,
 * one read takes them all, and a read is what a chunk costs the isolate.
 *
 * Not workerd's `readAtLeast`: it waits for its minimum, and on a tee branch passes that minimum
 * on to the source, so the other branch would get nothing until that many bytes came.
 */
export function fillingReads(body: ReadableStream<Uint8Array>): FillingReads {
  let reader: ReadableStreamBYOBReader;
  try {
    reader = body.getReader({ mode: "byob" });
  } catch {
    const plain = body.getReader();
    return { reader: plain, read: () => plain.read(), reused: false };
  }
  // A read hands the buffer back (transferred) with what it filled.
  let buffer = new ArrayBuffer(FILL_READ_BYTES);
  return {
    reader,
    read: async () => {
      const step = await reader.read(new Uint8Array(buffer));
      if (step.value) buffer = step.value.buffer;
      return step as ReadableStreamReadResult<Uint8Array>;
    },
    reused: true,
  };
}
