import { join } from "./bytes.ts";

/**
 * Where SSE events end in a byte stream. A line ends with CRLF, LF or a lone CR, and an event with
 * a blank line: two line ends in a row, of any kind ("\n\n", "\r\n\r\n", "\r\r", "\n\r\n", …).
 * Whether a line end at a byte ends an event depends on no more than the two bytes before it.
 *
 * A CR may be the first half of a CRLF whose LF has not come yet. A CR that ends a blank line ends
 * the event there (a parser dispatches it at the CR), so the event goes out without waiting for
 * the next chunk; an LF that comes next is that line end's second half, not a line of its own, and
 * goes out as the end of the event before.
 */
const LF = 0x0a;
const CR = 0x0d;

/**
 * The most an EventAligner holds of an unfinished event (1 MiB). An event that outgrows it goes
 * out as it comes, up to its end: holding it whole would cost the isolate's memory (128 MB, shared
 * by every request in it) for a hook that needs no more than an event's start. LLM events are a
 * few hundred bytes; one this large is a hostile or broken upstream's.
 */
export const EVENT_HOLD_MAX_BYTES = 1024 * 1024;

/**
 * The most chunks held by reference before they are joined into one: an upstream that sends a byte
 * at a time would otherwise hold an object per byte. Each join copies at most
 * EVENT_HOLD_MAX_BYTES, once this many chunks: a bounded copy per chunk, never one that grows.
 */
const HELD_CHUNKS_MAX = 512;

/**
 * The last two bytes before a buffer, the later in the low byte (0: none): what an event end at the
 * buffer's first bytes depends on.
 */
export type Before = number;

export function beforeNext(before: Before, bytes: Uint8Array): Before {
  const n = bytes.length;
  if (n >= 2) return ((bytes[n - 2] as number) << 8) | (bytes[n - 1] as number);
  return n === 1 ? ((before & 0xff) << 8) | (bytes[0] as number) : before;
}

/** bytes[i], where i may be -1 or -2: the bytes before the buffer. */
function byteAt(bytes: Uint8Array, i: number, before: Before): number {
  return i >= 0 ? (bytes[i] as number) : i === -1 ? before & 0xff : before >> 8;
}

/** Whether bytes[i] ends a blank line: it ends a line, and so does what comes before that line end. */
function endsEventAt(bytes: Uint8Array, i: number, before: Before): boolean {
  const b = bytes[i];
  if (b !== LF && b !== CR) return false;
  const prev = byteAt(bytes, i - 1, before);
  // The LF of a CRLF: the line end began at the CR, and what came before the CR decides.
  const beforeLineEnd = b === LF && prev === CR ? byteAt(bytes, i - 2, before) : prev;
  return beforeLineEnd === LF || beforeLineEnd === CR;
}

/**
 * Index just past the last complete event in `bytes`, or 0 when none ends in it. `before`: the two
 * bytes that came before it in the stream, for an end split across chunks. Looks at the last byte
 * first: an upstream that writes whole events has the answer there.
 */
export function endOfLastEvent(bytes: Uint8Array, before: Before = 0): number {
  const n = bytes.length;
  if (n === 0) return 0;
  if (endsEventAt(bytes, n - 1, before)) return n;
  let lf = bytes.lastIndexOf(LF);
  let cr = bytes.lastIndexOf(CR);
  while (lf >= 0 || cr >= 0) {
    // A CR's LF comes after it, so a CRLF that ends an event is found at its LF first.
    const i = Math.max(lf, cr);
    if (endsEventAt(bytes, i, before)) return i + 1;
    if (i === lf) lf = i > 0 ? bytes.lastIndexOf(LF, i - 1) : -1;
    else cr = i > 0 ? bytes.lastIndexOf(CR, i - 1) : -1;
  }
  return 0;
}

/**
 * Calls `f` with the index just past each event that ends in `bytes`, in order (`before` as for
 * endOfLastEvent): a CR followed by its LF ends the event at the LF. A native search finds each
 * line end, so an event costs a few calls, not a JavaScript step a byte.
 */
function forEachEventEnd(bytes: Uint8Array, before: Before, f: (end: number) => void): void {
  let lf = bytes.indexOf(LF);
  let cr = bytes.indexOf(CR);
  while (lf >= 0 || cr >= 0) {
    const i = lf < 0 ? cr : cr < 0 ? lf : Math.min(lf, cr);
    if (endsEventAt(bytes, i, before) && !(bytes[i] === CR && bytes[i + 1] === LF)) f(i + 1);
    if (i === lf) lf = bytes.indexOf(LF, i + 1);
    else cr = bytes.indexOf(CR, i + 1);
  }
}

/** Index just past each event that ends in `bytes`, in order (`before` as for endOfLastEvent). */
export function eventEnds(bytes: Uint8Array, before: Before): number[] {
  const ends: number[] = [];
  forEachEventEnd(bytes, before, (end) => ends.push(end));
  return ends;
}

/**
 * Counts the events that end in a byte stream, chunk by chunk, as eventEnds finds them, but a
 * CRLF's CR and LF in two chunks once: an LF that begins a chunk after a CR that ended an event is
 * that line end's second half (eventEnds gives it an end of its own, where it splits a chunk).
 */
export class EventCounter {
  count = 0;
  private before: Before = 0;

  push(bytes: Uint8Array): void {
    const secondHalf = bytes[0] === LF && (this.before & 0xff) === CR;
    forEachEventEnd(bytes, this.before, (end) => {
      if (!(end === 1 && secondHalf)) this.count++;
    });
    this.before = beforeNext(this.before, bytes);
  }
}

const fieldDecoder = new TextDecoder();

/**
 * An event's `event:` name and its data (its `data:` lines joined by a line feed), as a client's
 * parser reads them: what follows each field's colon, less one space. null for a field it lacks.
 * `error`: the value of an `error:` field (the last one), which no client's parser reads: llama.cpp's
 * llama-server of 2024 to mid-2025 writes a stream's error so, with no data line
 * (server_sent_event(sink, "error", …)), and a client sees no event at all.
 */
export function eventFields(event: Uint8Array): { name: string | null; data: string | null; error: string | null } {
  let name: string | null = null;
  let data: string | null = null;
  let error: string | null = null;
  for (const line of fieldDecoder.decode(event).split(/\r\n|\r|\n/)) {
    if (line.startsWith("event:")) name = fieldValue(line, "event:".length);
    else if (line.startsWith("data:")) data = data === null ? fieldValue(line, "data:".length) : `${data}\n${fieldValue(line, "data:".length)}`;
    else if (line.startsWith("error:")) error = fieldValue(line, "error:".length);
  }
  return { name, data, error };
}

function fieldValue(line: string, from: number): string {
  return line.charCodeAt(from) === 0x20 ? line.slice(from + 1) : line.slice(from);
}

const EMPTY = new Uint8Array(0);

/**
 * Splits what passes through a stream at event boundaries: `take(chunk)` returns the part that
 * completes events, and holds back an unfinished event's beginning until it is finished — so a
 * stream cut mid-event leaves no half event in front of the error event that ends it, and a
 * keep-alive comment can be written between any two writes.
 *
 * Each chunk is looked at once: the held chunks are kept by reference and joined once, when the
 * event's end comes. An event that outgrows EVENT_HOLD_MAX_BYTES is passed on as it comes
 * (`midEvent` says so) until an event ends again.
 */
export class EventAligner {
  private held: Uint8Array[] = [];
  private heldBytes = 0;
  private before: Before = 0;
  private passing = false;

  take(chunk: Uint8Array): Uint8Array {
    const end = endOfLastEvent(chunk, this.before);
    this.before = beforeNext(this.before, chunk);
    if (end === 0) {
      if (this.passing) return chunk;
      if (this.heldBytes + chunk.length <= EVENT_HOLD_MAX_BYTES) {
        this.hold(chunk);
        return EMPTY;
      }
      this.passing = true;
      return this.release(chunk);
    }
    const rest = chunk.length - end;
    // An unfinished event's start too large to hold goes out with the events before it.
    this.passing = rest > EVENT_HOLD_MAX_BYTES;
    if (rest === 0 || this.passing) return this.release(chunk);
    const out = this.release(chunk.subarray(0, end));
    // A copy of its own: the chunk's buffer is the upstream's, and this outlives the chunk.
    this.hold(chunk.slice(end));
    return out;
  }

  /** Whether an unfinished event is held back. */
  get holding(): boolean {
    return this.heldBytes > 0;
  }

  /**
   * Whether what went out ends inside an event (one too large to hold, passed on as it comes): a
   * comment or an error event written now would land inside it.
   */
  get midEvent(): boolean {
    return this.passing;
  }

  /** The held-back rest, at the stream's normal end (a server that omits the last blank line). */
  flush(): Uint8Array | null {
    return this.heldBytes > 0 ? this.release(EMPTY) : null;
  }

  private hold(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    if (this.held.length === HELD_CHUNKS_MAX) this.held = [join(this.held)];
    this.held.push(bytes);
    this.heldBytes += bytes.length;
  }

  /** What is held, then `bytes`, as one array; nothing is held after. */
  private release(bytes: Uint8Array): Uint8Array {
    if (this.heldBytes === 0) return bytes;
    this.held.push(bytes);
    const out = join(this.held);
    this.held = [];
    this.heldBytes = 0;
    return out;
  }
}
