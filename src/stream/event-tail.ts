import { join } from "./bytes.ts";
import { beforeNext, endOfLastEvent, type Before } from "./sse-boundary.ts";

/**
 * The most of a Responses stream's end kept to read its closing event whole (4 MiB). That event
 * (response.completed) repeats the whole answer before its usage, and the request's fields after
 * it (SGLang): ~5 bytes an output token, so 4 MiB holds the event of an answer of several hundred
 * thousand tokens. An event larger than that is charged an estimate.
 */
export const EVENT_TAIL_MAX_BYTES = 4 * 1024 * 1024;

/**
 * Chunks kept by reference before the small ones among them are joined into one: an upstream that
 * drips a byte at a time would otherwise hold an object per byte of the event. A run of this many
 * is joined when it averages under MERGE_BELOW_BYTES a chunk; each byte is copied once at most.
 */
const MERGE_RUN = 512;
const MERGE_BELOW_BYTES = 128;

/**
 * Keeps references to the end of an event stream from the start of the event its last `window`
 * bytes begin in, up to `max` bytes: a stream's closing event is then held whole however long it
 * is, and what follows it (a `[DONE]`, shorter than `window`) too. Per chunk: the native search for
 * its last event end that the relay's EventAligner makes (endOfLastEvent), and no decoding.
 */
export class EventTail {
  private chunks: Uint8Array[] = [];
  /** Stream offset of chunks[0]'s first byte. */
  private start = 0;
  private total = 0;
  private before: Before = 0;
  /**
   * Stream offsets where an event begins (the last one found in each chunk), oldest first. The
   * first is where the kept bytes are read from: the latest start at or before the window's.
   */
  private starts: number[] = [0];
  /** The newest chunks not yet looked at for a join, and their bytes. */
  private loose = 0;
  private looseBytes = 0;
  private readonly window: number;
  private readonly max: number;

  constructor(window: number, max: number) {
    this.window = window;
    this.max = Math.max(window, max);
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    const end = endOfLastEvent(chunk, this.before);
    this.before = beforeNext(this.before, chunk);
    if (end > 0) this.starts.push(this.total + end);
    this.chunks.push(chunk);
    this.total += chunk.length;
    this.loose++;
    this.looseBytes += chunk.length;
    if (this.loose === MERGE_RUN) this.mergeLoose();
    this.trim();
  }

  /**
   * The kept bytes, and whether they begin where an event begins: otherwise (an event larger than
   * `max` was cut) their first event is a piece of one.
   */
  view(): { bytes: Uint8Array; atEventStart: boolean } {
    const anchor = this.starts[0] as number;
    const all = this.chunks.length === 1 ? (this.chunks[0] as Uint8Array) : join(this.chunks);
    if (anchor < this.start) return { bytes: all, atEventStart: false };
    return { bytes: all.subarray(anchor - this.start), atEventStart: true };
  }

  private trim(): void {
    const windowStart = this.total - this.window;
    // The start of the event the window begins in: the latest start at or before the window's.
    while (this.starts.length > 1 && (this.starts[1] as number) <= windowStart) this.starts.shift();
    // Chunks wholly before it go, and past `max` any others: the event is then charged an estimate.
    const floor = Math.max(this.starts[0] as number, this.total - this.max);
    while (this.chunks.length > 1 && this.start + (this.chunks[0] as Uint8Array).length <= floor) {
      this.start += (this.chunks.shift() as Uint8Array).length;
      this.loose = Math.min(this.loose, this.chunks.length);
    }
  }

  private mergeLoose(): void {
    if (this.looseBytes < MERGE_RUN * MERGE_BELOW_BYTES) {
      const at = this.chunks.length - this.loose;
      this.chunks.push(join(this.chunks.splice(at, this.loose)));
    }
    this.loose = 0;
    this.looseBytes = 0;
  }
}
