import { concat } from "./bytes.ts";

/** A body's first bytes, and when they came (the `now` clock's time). */
export interface FirstBytes {
  chunk: Uint8Array;
  at: number;
}

/**
 * Reads a body up to its first bytes, skipping empty chunks; null when it ends with none. The
 * reader is released: the rest of the body stays in it for the relay.
 *
 * `sse`: an event stream's first bytes are its first event's. SSE comments before it (a proxy
 * keeping a waiting request's connection alive) are no token: they are kept and go out with the
 * first event, and a stream of comments alone has no first bytes.
 */
export async function readFirstBytes(body: ReadableStream<Uint8Array>, now: () => number, sse = false): Promise<FirstBytes | null> {
  const reader = body.getReader();
  let comments: Uint8Array | null = null;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return null;
      if (value.byteLength === 0) continue;
      if (sse && onlyComments(value)) {
        comments = comments ? concat(comments, value) : value;
        continue;
      }
      return { chunk: comments ? concat(comments, value) : value, at: now() };
    }
  } finally {
    reader.releaseLock();
  }
}

const COLON = 0x3a;
const LF = 0x0a;
const CR = 0x0d;

/** Every line of `chunk` an SSE comment (`:` first) or blank: it dispatches no event. */
function onlyComments(chunk: Uint8Array): boolean {
  // The common case, a chunk that opens with `data:` or `event:`, is decided at its first byte.
  if (chunk[0] !== COLON) return false;
  let lineStart = true;
  for (let i = 0; i < chunk.length; i++) {
    const c = chunk[i] as number;
    if (c === LF || c === CR) lineStart = true;
    else if (lineStart) {
      if (c !== COLON) return false;
      lineStart = false;
    }
  }
  return true;
}
