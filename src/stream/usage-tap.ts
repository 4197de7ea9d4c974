import type { FirstBytes } from "./first-bytes.ts";
import { EventCounter } from "./sse-boundary.ts";
import { BodyEnds, usageRead, type Usage } from "./usage.ts";

/** What a tap saw of a body: its length and events, its first byte's time, and its final usage. */
export interface Tapped {
  bytes: number;
  /** The SSE events that ended in what it read, when they were counted. */
  events: number | null;
  /** When the first bytes came (the `now` clock's time); null for an empty or failed body. */
  firstAt: number | null;
  usage: Usage | null;
}

/** The most one read of a tap takes: what it holds of the body between two drains is in the tee's queue. */
export const TAP_READ_BYTES = 16 * 1024;

/**
 * How often a tap drains what its branch has queued while the body still flows. Each drain is a
 * timer and a read or two, not a read per event; between drains the tee holds about a second of
 * the answer (~50 events of a fast stream, a few KiB).
 */
export const TAP_DRAIN_MS = 1000;

/**
 * The most reads one drain makes before the body ends (128 KiB): a read that comes back full may
 * have pulled the upstream itself, for the tap alone, while a client that stopped reading holds its
 * branch back; so a drain stops there, and a paused client leaves at most this much a second
 * queued for it (an LLM stream sends a few KiB a second). At the end, the tap reads to the end.
 */
export const TAP_READS_PER_DRAIN = 8;

/**
 * Whether a request asks for a stream that may come faster than a tap drains it (TAP_READ_BYTES ×
 * TAP_READS_PER_DRAIN a TAP_DRAIN_MS, 128 KiB a second): its logprobs (~1.5 KiB an event with 20
 * top_logprobs, a few hundred KiB a second from a fast engine) or several choices at once (`n`).
 * A tap that falls behind leaves the tee queueing for it what the client has read already: the
 * whole answer, in the isolate. Such a stream's usage is read in the JavaScript loop, which holds
 * an event at a time.
 */
export function mayOutrunTap(body: Record<string, unknown>): boolean {
  const { logprobs, top_logprobs: top, n } = body;
  // A completions request's `logprobs` is a count, 0 included (the chosen token's alone); chat's a boolean.
  return (logprobs !== undefined && logprobs !== null && logprobs !== false) || (typeof top === "number" && top > 0) || (typeof n === "number" && n > 1);
}

/**
 * Reads a copy of a stream (one branch of its `tee()`) to learn its length, first byte's time and
 * final usage, while the other branch is pumped to the client natively. The client's branch never
 * waits on it. It reads the first bytes at once (their time is the first token's), then lets the
 * tee queue the rest and drains the queue every TAP_DRAIN_MS, and once more when `finish()` says
 * the body ended: where reads fill a buffer from everything queued (a BYOB reader in workerd), a
 * stream of small events costs JavaScript a read or two a second, not one per event.
 *
 * Not workerd's `readAtLeast`: a tee passes a branch's minimum on to its source, so the client's
 * branch would get nothing until that many bytes came.
 *
 * A tee pulls its source when either branch reads, and queues what it gets for the other. Between
 * drains the tap has no read pending, and a drain's last read is the only one that can wait on the
 * source: so it pulls at most a chunk a drain beyond what the client's branch asks for, and a slow
 * client still holds the upstream back instead of having its answer queued in the isolate.
 *
 * The other way round, what the client's branch reads ahead of the tap waits in the tap's queue:
 * a tap is for a stream, whose bytes come far slower than a drain takes them; a whole answer,
 * which comes as fast as the client reads, is read for its usage in relay's JavaScript loop.
 */
export class UsageTap {
  readonly ended: Promise<Tapped>;
  private reader: ReadableStreamDefaultReader<Uint8Array> | ReadableStreamBYOBReader | null = null;
  private finished = false;
  private leaving = false;
  /** Lets a branch that neither sends nor ends go, once the client left. */
  private letGo: ReturnType<typeof setTimeout> | undefined;
  private wake: (() => void) | null = null;

  /**
   * `first`: the body's first bytes, read before it was teed (they are not in the branch).
   * `countEvents`: count the SSE events too (EventCounter). `responses`: a Responses API stream's
   * tail, read as BodyEnds reads one.
   */
  constructor(branch: ReadableStream<Uint8Array>, now: () => number, first: FirstBytes | null = null, countEvents = false, responses?: number) {
    this.ended = this.read(branch, now, first, countEvents ? new EventCounter() : null, responses);
  }

  /** The body ended (or failed): drain what is left now, without waiting for the next drain. */
  finish(): void {
    this.finished = true;
    this.wake?.();
  }

  /**
   * Stops reading (the client left): with the other branch cancelled too, the upstream body is.
   * What the tee queued for the tap is read first — the events that came before the client left,
   * what a key is charged by when their usage never comes (src/tenants/estimate.ts) — up to a read
   * that empties the queue or TAP_READS_PER_DRAIN reads, or until the upstream request's abort
   * ends the branch; a source that neither sends nor ends is let go after TAP_DRAIN_MS.
   */
  cancel(): void {
    this.leaving = true;
    this.finish();
    this.letGo ??= setTimeout(() => this.reader?.cancel().catch(() => {}), TAP_DRAIN_MS);
  }

  /** Never rejects: what was read by a failure, its own or the upstream's, is what it reports. */
  private async read(branch: ReadableStream<Uint8Array>, now: () => number, first: FirstBytes | null, events: EventCounter | null, responses: number | undefined): Promise<Tapped> {
    // A stream's ends: its usage is its last event's, so nothing is caught per chunk (BodyEnds'
    // catchUsage); a non-streamed body whose usage is read takes relay's JavaScript loop instead.
    const ends = new BodyEnds(false, responses);
    let bytes = first ? first.chunk.byteLength : 0;
    let firstAt: number | null = first ? first.at : null;
    const readSome = filling(branch);
    this.reader = readSome.reader;
    let stopped = false;
    try {
      if (first) {
        ends.push(first.chunk);
        events?.push(first.chunk);
      }
      for (let reads = 0, drained = false, leftReads = 0; ; reads++) {
        if ((drained || reads >= TAP_READS_PER_DRAIN) && firstAt !== null && !this.finished) {
          await this.untilDrain();
          reads = 0;
        }
        const { value, done } = await readSome.read();
        if (done) break;
        if (value.byteLength === 0) continue;
        if (firstAt === null) firstAt = now();
        bytes += value.byteLength;
        events?.push(value);
        // A copy of its own size: a view would pin the whole read buffer for the ends' sake.
        ends.push(value.slice());
        // Less than a full buffer: the queue is empty, and the next read would wait for the upstream.
        drained = value.byteLength < TAP_READ_BYTES;
        if (this.leaving && (drained || ++leftReads >= TAP_READS_PER_DRAIN)) break;
      }
    } catch {
      // The upstream failed or the client left (the client's branch says which), or reading here
      // threw: the branch is let go, so that the tee queues nothing more for it.
      stopped = true;
    }
    if (this.leaving || stopped) {
      clearTimeout(this.letGo);
      readSome.reader.cancel().catch(() => {});
    }
    return { bytes, events: events && events.count, firstAt, usage: usageRead(ends) };
  }

  private untilDrain(): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, TAP_DRAIN_MS);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
    });
  }
}

/**
 * Reads of a branch that fill a buffer from everything it has queued (a BYOB reader), or a chunk
 * at a time where the stream is no byte stream (Node's tee of a JavaScript-made body, in tests).
 */
function filling(branch: ReadableStream<Uint8Array>): { reader: ReadableStreamDefaultReader<Uint8Array> | ReadableStreamBYOBReader; read: () => Promise<ReadableStreamReadResult<Uint8Array>> } {
  try {
    const reader = branch.getReader({ mode: "byob" });
    // One buffer for the stream: a read hands it back (transferred) with what it filled.
    let buffer = new ArrayBuffer(TAP_READ_BYTES);
    return {
      reader,
      read: async () => {
        const step = await reader.read(new Uint8Array(buffer));
        if (step.value) buffer = step.value.buffer;
        return step;
      },
    };
  } catch {
    const reader = branch.getReader();
    return { reader, read: () => reader.read() };
  }
}
