import { join } from "./bytes.ts";
import { EVENT_HOLD_MAX_BYTES } from "./sse-boundary.ts";

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
  const comments = new KeptComments();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return null;
      if (value.byteLength === 0) continue;
      if (sse && onlyComments(value)) {
        comments.keep(value);
        continue;
      }
      return { chunk: comments.before(value), at: now() };
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * The comments read before the first event, joined once when it comes. Held up to
 * EVENT_HOLD_MAX_BYTES: an upstream that sends nothing else until the first-byte limit must not
 * fill the isolate's memory. Past it they are dropped, all of them, and a line end goes out in
 * their place, ending a comment line a dropped chunk may have left open: the event after it
 * stays an event. They carry nothing a client reads.
 */
class KeptComments {
  private chunks: Uint8Array[] = [];
  private bytes = 0;

  keep(chunk: Uint8Array): void {
    if (this.bytes + chunk.length > EVENT_HOLD_MAX_BYTES) {
      this.chunks = [LINE_END];
      this.bytes = LINE_END.length;
      return;
    }
    this.chunks.push(chunk);
    this.bytes += chunk.length;
  }

  before(chunk: Uint8Array): Uint8Array {
    if (this.chunks.length === 0) return chunk;
    this.chunks.push(chunk);
    return join(this.chunks);
  }
}

const COLON = 0x3a;
const LF = 0x0a;
const CR = 0x0d;
const LINE_END = new Uint8Array([LF]);

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
