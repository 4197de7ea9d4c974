import { concat } from "./bytes.ts";

/**
 * Where SSE events end in a byte stream. An event ends with a blank line: "\n\n", or "\r\n\r\n"
 * (whose last three bytes are "\n\r\n"). Bare "\r" line endings are legal SSE that no inference
 * server sends; a stream using them is treated as one long unfinished event and passed on at its end.
 */
const LF = 0x0a;
const CR = 0x0d;

/** Index just past the last complete event in `bytes`, or 0 when none ends in it. */
export function endOfLastEvent(bytes: Uint8Array): number {
  for (let i = bytes.length - 1; i >= 1; i--) {
    if (bytes[i] !== LF) continue;
    if (bytes[i - 1] === LF || (bytes[i - 1] === CR && i >= 2 && bytes[i - 2] === LF)) return i + 1;
  }
  return 0;
}

/**
 * Splits what passes through a stream at event boundaries: `take(chunk)` returns the part that
 * completes events, and holds back an unfinished event's beginning until it is finished — so a
 * stream cut mid-event leaves no half event in front of the error event that ends it, and a
 * keep-alive comment can be written between any two writes.
 */
export class EventAligner {
  private held: Uint8Array | null = null;

  take(chunk: Uint8Array): Uint8Array {
    const bytes = this.held ? concat(this.held, chunk) : chunk;
    // The usual case: an upstream writes whole events, so the chunk ends where an event does.
    const n = bytes.length;
    if (n >= 2 && bytes[n - 1] === LF && (bytes[n - 2] === LF || (bytes[n - 2] === CR && bytes[n - 3] === LF))) {
      this.held = null;
      return bytes;
    }
    const end = endOfLastEvent(bytes);
    this.held = end === n ? null : bytes.slice(end);
    return bytes.subarray(0, end);
  }

  /** Whether an unfinished event is held back. */
  get holding(): boolean {
    return this.held !== null;
  }

  /** The held-back rest, at the stream's normal end (a server that omits the last blank line). */
  flush(): Uint8Array | null {
    const rest = this.held;
    this.held = null;
    return rest;
  }
}
