import { sseErrorEvent } from "../openai/errors.ts";
import type { ChunkTransform, CompletionSummary } from "../hooks/types.ts";
import { concat } from "./bytes.ts";
import { EventAligner, EventCounter } from "./sse-boundary.ts";
import { BodyEnds, usageRead } from "./usage.ts";
import { readFirstBytes, type FirstBytes } from "./first-bytes.ts";
import { UsageTap, type Tapped } from "./usage-tap.ts";

export interface RelayOptions {
  /** Per-chunk transforms from hooks; empty on the plain pass-through path. */
  transforms: ChunkTransform[];
  /** An SSE body gets an error event when the upstream dies mid-stream. */
  sse: boolean;
  /** A Responses API stream: its error event is that API's (sseErrorEvent). */
  responses?: boolean;
  /** When the upstream request went out, for time to first byte. */
  sentAt: number;
  now: () => number;
  onEnd: (summary: CompletionSummary) => void;
  /**
   * A byte pipe the runtime pumps without running JavaScript per chunk (workerd's
   * IdentityTransformStream). With it, no transform and no stall bound, the body takes the fast
   * path: nothing per chunk at all, and the summary has no byte count or usage — unless readUsage
   * asks for them: a tap reads a stream's from a copy of the body a second's worth at a time, and a
   * whole answer takes the JavaScript loop (see relayTapped).
   */
  nativePipe?: () => ReadableWritablePair<Uint8Array, Uint8Array>;
  /** Whether the client has gone (request.signal in Workers); an errored pipe says so too. */
  clientGone?: () => boolean;
  /** The relay found the client gone: stop the upstream request. */
  onClientGone?: () => void;
  /**
   * A stalled upstream: a read of it waiting this long calls onIdle (which aborts the upstream
   * fetch) and the stream ends with an error event saying so. It needs every chunk seen, so it
   * takes the JavaScript path.
   */
  idleTimeoutMs?: number;
  onIdle?: () => void;
  /**
   * A whole answer's bound on its upstream: its reads may wait this long in all, then onReadLimit
   * (which aborts the upstream fetch). Time a write waits on a client that reads slowly is not
   * counted: the answer was generated, and only an upstream that drips it is cut. The native pipe
   * sees no read: there it bounds the body's whole time.
   */
  readLimitMs?: number;
  onReadLimit?: () => void;
  /**
   * On the JavaScript path, an SSE stream idle this long gets a comment line, and again at this
   * interval while it stays idle. The runtime learns that a client has left only when a write to
   * it fails; without these writes a client that left a silent stream would hold its slot until
   * the upstream spoke again. 0 or absent: none.
   */
  keepAliveMs?: number;
  /** The summary must have the upstream's usage and byte count (a virtual key counts tokens). */
  readUsage?: boolean;
  /**
   * With readUsage, an SSE body's events are counted too: what a virtual key is charged by when
   * the usage never comes (src/tenants/estimate.ts). A request sampled for routing's feedback alone
   * has no use for them.
   */
  countEvents?: boolean;
  /**
   * With readUsage, an SSE body that may come faster than a tap drains it (usage-tap.ts,
   * mayOutrunTap): it takes the JavaScript loop instead of the tap.
   */
  outrunsTap?: boolean;
  /**
   * With readUsage, a Responses API answer's: its last this many bytes are kept (responsesTailBytes;
   * a stream's back to the start of the event they begin in, EventTail) and its usage is read where
   * that API puts it, not from a search of its text (BodyEnds).
   */
  responsesUsageBytes?: number;
  /**
   * The body's first bytes, already read by the caller (readFirstBytes: a stream's first token,
   * awaited under the first-byte limit before anything went to the client); null: it ended with
   * none. The relay goes on from there. Absent: the relay reads them itself.
   */
  first?: FirstBytes | null;
}


const encoder = new TextEncoder();
/** A comment line and a blank line: every SSE parser skips it, and it dispatches no event. */
const KEEP_ALIVE = encoder.encode(": keep-alive\n\n");

/**
 * Passes an upstream body to the client as it arrives. Per chunk it only notes the first
 * byte's time and keeps a reference for the usage (BodyEnds), unless a hook asked for chunks. At the end it
 * reports how the body ended — normally, upstream failure (an SSE body then gets an error event
 * instead of a silent truncation), or client disconnect (the upstream body is cancelled).
 *
 * With hooks or a stall bound, one loop reads the upstream and writes what the hooks make of each
 * chunk into a pipe the runtime pumps to the client (nativePipe in Workers): the client side stays
 * native, so JavaScript runs once per chunk, where a TransformStream would also run it for the
 * runtime's pulls of a JavaScript-backed body.
 */
export function relay(body: ReadableStream<Uint8Array>, o: RelayOptions): ReadableStream<Uint8Array> {
  const pipe = o.nativePipe ? o.nativePipe() : new TransformStream<Uint8Array, Uint8Array>();
  if (o.transforms.length === 0 && o.nativePipe && !o.idleTimeoutMs && !(o.readUsage && (!o.sse || o.outrunsTap))) return o.readUsage ? relayTapped(body, o, pipe) : relayNative(body, o, pipe);
  void pump(body, pipe.writable.getWriter(), o);
  return pipe.readable;
}

/**
 * What a client is told when the relay itself failed (a hook's transform threw, or reading the
 * usage did): not what was thrown, which may say anything.
 */
const RELAY_FAILED = "the gateway could not relay the rest of the upstream's answer";

async function pump(body: ReadableStream<Uint8Array>, writer: WritableStreamDefaultWriter<Uint8Array>, o: RelayOptions): Promise<void> {
  const { transforms } = o;
  // A body whose usage no one asked for keeps nothing of it: a hook alone reads no usage.
  const ends = o.readUsage ? new BodyEnds(!o.sse, o.responsesUsageBytes, true) : null;
  const reader = body.getReader();
  // Only whole events reach the client: a cut stream's error event never lands inside one, and a
  // keep-alive comment can go between any two writes.
  const aligner = o.sse ? new EventAligner() : null;
  const events = o.sse && o.readUsage && o.countEvents ? new EventCounter() : null;
  let bytes = 0;
  // A whole answer's first byte came with its headers: now (see relayNative).
  let firstAt: number | null = o.sse ? null : o.now();
  /** When the last read of the upstream began: quiet time is counted from there. */
  let lastAt = o.now();
  let reading = false;
  /** How long the reads that ended waited on the upstream, for readLimitMs. */
  let readWaited = 0;
  let stalled = false;
  let left = false;
  let writing = 0;
  let settled = false;
  /** The client's stream was closed or aborted: nothing more goes to it. */
  let closed = false;

  /** Reports how the body ended, once: onEnd settles the request's lease. */
  const end = (outcome: CompletionSummary["outcome"], relayFailed = false): void => {
    if (settled) return;
    settled = true;
    const summary: CompletionSummary = {
      outcome,
      bytes,
      // Usage that came is the upstream's work done, the client gone after it or not.
      usage: ends && usageRead(ends),
      ttftMs: firstAt === null ? null : firstAt - o.sentAt,
      events: events && events.count,
    };
    if (relayFailed) summary.relayFailed = true;
    o.onEnd(summary);
  };
  const close = (): void => {
    closed = true;
    writer.close().catch(() => {});
  };
  const abort = (err?: unknown): void => {
    closed = true;
    writer.abort(err).catch(() => {});
  };
  const leave = (): void => {
    if (left) return;
    left = true;
    reader.cancel().catch(() => {});
    o.onClientGone?.();
  };
  /** Writes to the client; false once it went away (the upstream is then cancelled). */
  const send = async (chunk: Uint8Array | null): Promise<boolean> => {
    if (!chunk || chunk.length === 0) return !left;
    writing++;
    try {
      await writer.write(chunk);
      return true;
    } catch {
      leave();
      return false;
    } finally {
      writing--;
    }
  };
  const align = (chunk: Uint8Array | null): Uint8Array | null => (chunk && aligner ? aligner.take(chunk) : chunk);
  /** Ends an SSE body with an error event (after a blank line where it is inside one), a whole answer with an error. */
  const fail = async (err: unknown, message: string, code: string): Promise<void> => {
    if (!o.sse) return abort(err);
    const error = sseErrorEvent(message, code, o.responses);
    if (await send(encoder.encode(aligner?.midEvent ? `\n\n${error}` : error))) close();
  };

  const idleMs = o.idleTimeoutMs;
  const keepAliveMs = o.sse ? (o.keepAliveMs ?? 0) : 0;
  const tickMs = Math.min(keepAliveMs || Infinity, idleMs ? idleMs / 4 : Infinity);
  // One timer per stream, not one per chunk: a read only notes when it began.
  const ticker =
    tickMs === Infinity
      ? undefined
      : setInterval(() => {
          const quiet = o.now() - lastAt;
          // Only a read the upstream leaves unanswered is its stall: while a write waits on a
          // client that is not reading, nothing is read, and the wait is the client's.
          if (idleMs && reading && quiet >= idleMs) {
            stalled = true;
            clearInterval(ticker);
            o.onIdle?.();
          } else if (keepAliveMs && quiet >= keepAliveMs && writing === 0 && !left && !aligner?.midEvent) {
            void send(KEEP_ALIVE);
          }
        }, tickMs);
  // Checked when the limit could be reached at the earliest: when every moment until then is spent reading.
  const readLimitMs = o.readLimitMs;
  let readLimiter: ReturnType<typeof setTimeout> | undefined;
  const checkReadLimit = (): void => {
    if (readLimitMs === undefined) return;
    const waited = readWaited + (reading ? o.now() - lastAt : 0);
    if (waited >= readLimitMs) o.onReadLimit?.();
    else readLimiter = setTimeout(checkReadLimit, readLimitMs - waited);
  };
  checkReadLimit();

  // Bytes the caller read already go first, at the time they came.
  let pending = o.first ?? null;
  try {
    for (;;) {
      let step: ReadableStreamReadResult<Uint8Array>;
      try {
        if (pending) step = { done: false, value: pending.chunk };
        else {
          lastAt = o.now();
          reading = true;
          step = await reader.read();
          reading = false;
          if (readLimitMs !== undefined) readWaited += o.now() - lastAt;
        }
      } catch (err) {
        reading = false;
        if (left || o.clientGone?.()) {
          abort();
          return end("client-abort");
        }
        end("upstream-error");
        if (!o.sse) return abort(err);
        const message = stalled
          ? `upstream stream stalled: no bytes for ${idleMs} ms after ${bytes} bytes`
          : `upstream stream failed after ${bytes} bytes: ${err instanceof Error ? err.message : String(err)}`;
        // What the hooks still hold is flushed only as far as it completes events; an unfinished
        // event is dropped, so the error event is the next thing the client parses. One too large
        // to hold went out in part: a blank line ends it first, as on the fast path.
        if (!(await send(align(flushAll(transforms))))) return;
        return await fail(err, message, stalled ? "upstream_stream_stalled" : "upstream_stream_error");
      }
      if (step.done) break;
      if (left) break;
      const chunk = step.value;
      if (firstAt === null) firstAt = pending ? pending.at : o.now();
      pending = null;
      bytes += chunk.length;
      ends?.push(chunk);
      events?.push(chunk);
      let out = chunk;
      for (const t of transforms) out = t.transform(out);
      if (!(await send(align(out)))) return end("client-abort");
    }
    if (left) {
      abort();
      return end("client-abort");
    }
    if (!(await send(align(flushAll(transforms))))) return end("client-abort");
    if (aligner && !(await send(aligner.flush()))) return end("client-abort");
    close();
    end("ok");
  } catch (err) {
    // The relay's own failure, not the upstream's: a hook's transform or flush threw (or onEnd, after
    // the end was reported). The upstream is let go, the end reported once, and the client's stream
    // ends as on an upstream failure.
    reading = false;
    reader.cancel().catch(() => {});
    if (left || o.clientGone?.()) {
      if (!closed) abort();
      return end("client-abort");
    }
    end("upstream-error", true);
    if (!closed) await fail(err, `upstream stream failed after ${bytes} bytes: ${RELAY_FAILED}`, "upstream_stream_error");
  } finally {
    clearInterval(ticker);
    clearTimeout(readLimiter);
  }
}

/**
 * What the hooks still hold at the body's end, in their order: what one lets out goes through
 * the hooks after it, as its chunks did, before they let out their own.
 */
function flushAll(transforms: readonly ChunkTransform[]): Uint8Array | null {
  let out: Uint8Array | null = null;
  for (const t of transforms) {
    const passed: Uint8Array | null = out ? t.transform(out) : null;
    const held = t.flush();
    out = passed && held ? concat(passed, held) : (passed ?? held);
  }
  return out;
}

/**
 * The fast path: for an event stream JavaScript reads the first chunk (its time is the summary's
 * ttftMs) and writes it on; the runtime then pumps the rest of the body into the client's stream
 * natively, and JavaScript runs once more, when the pipe settles, to learn how the body ended and
 * release the lease. One JavaScript read per stream, whatever its length.
 *
 * A whole answer is computed before its headers are sent (vLLM, SGLang and llama.cpp answer a
 * non-streamed request when it is done), so its headers' arrival — now — is its first byte, and
 * no chunk is read: that read costs ~130 µs of workerd CPU (bench:ceiling, floor+ttft − floor+pipe).
 */
function relayNative(body: ReadableStream<Uint8Array>, o: RelayOptions, pipe: ReadableWritablePair<Uint8Array, Uint8Array>): ReadableStream<Uint8Array> {
  let ttftMs: number | null = o.sse ? null : o.now() - o.sentAt;
  const passFirst = async (): Promise<void> => {
    const first = o.first !== undefined ? o.first : await readFirstBytes(body, o.now, true);
    if (!first) return;
    ttftMs = first.at - o.sentAt;
    await writeFirst(pipe, first);
  };
  // Bytes read before the relay (a stream request's first ones, whatever the answer turned out to be) go first.
  const before = o.sse ? passFirst() : o.first ? writeFirst(pipe, o.first) : Promise.resolve();
  pumpToClient(body, o, pipe, before, {
    end: (outcome) => o.onEnd({ outcome, bytes: null, usage: null, ttftMs, events: null }),
    cancel: () => void body.cancel().catch(() => {}),
  });
  return pipe.readable;
}

/**
 * The fast path for a stream whose usage must be read (a virtual key counts its tokens, or
 * routing's feedback sampled it) and that no hook rewrites: the body is teed, one branch pumped to
 * the client natively as on the fast path, the other read by a UsageTap once a second and at its
 * end. Reading every chunk in the JavaScript loop instead cost +80–123 µs of workerd CPU a chunk
 * over the master key (bench:ceiling); the tap, +0.2. The client's branch does not wait on the tap.
 * No keep-alive comments: as on the fast path, a silent stream's departed client is found at its
 * next event (streamIdleTimeoutMs takes the JavaScript loop, which writes them).
 *
 * Not a whole answer's: a tee queues for the slower branch what the faster one has read, and a
 * client reading a large answer (one too large to read whole, up to hundreds of MB) outruns a tap
 * that reads 128 KiB a second, so the answer piled up in the isolate. An LLM stream comes at a few
 * KiB a second, slower than the tap; a whole answer takes the JavaScript loop, which holds a chunk
 * at a time and its first and last 8 KiB.
 */
function relayTapped(body: ReadableStream<Uint8Array>, o: RelayOptions, pipe: ReadableWritablePair<Uint8Array, Uint8Array>): ReadableStream<Uint8Array> {
  const [toClient, toTap] = body.tee();
  // Bytes read before the tee go to the client first, and count in what the tap saw.
  const first = o.first ?? null;
  const tap = new UsageTap(toTap, o.now, first, o.countEvents === true, o.responsesUsageBytes);
  pumpToClient(toClient, o, pipe, first ? writeFirst(pipe, first) : Promise.resolve(), {
    end: (outcome) => {
      tap.finish();
      // A tap reports what it read even when reading failed (UsageTap.read); should it reject all
      // the same, the end is reported with nothing known of the body, and the lease still settled.
      void tap.ended
        .catch((): Tapped => ({ bytes: 0, events: null, firstAt: null, usage: null }))
        .then((t) => o.onEnd({ outcome, bytes: t.bytes, usage: t.usage, ttftMs: t.firstAt === null ? null : t.firstAt - o.sentAt, events: t.events }));
    },
    // The upstream body is cancelled once both branches are; pipeTo leaves the client's to this
    // (a tee branch's cancel waits for the other's, and pipeTo would wait on it before settling).
    cancel: () => {
      toClient.cancel().catch(() => {});
      tap.cancel();
    },
    preventCancel: true,
  });
  return pipe.readable;
}

/**
 * A body handed over as it is, with the bytes read from it first put back in front: the runtime
 * pipes the rest natively, and a client that leaves cancels it. Nothing waits on its end.
 */
export function handOver(body: ReadableStream<Uint8Array>, first: FirstBytes, pipe: ReadableWritablePair<Uint8Array, Uint8Array>): ReadableStream<Uint8Array> {
  writeFirst(pipe, first)
    .then(() => body.pipeTo(pipe.writable))
    .catch(() => body.cancel().catch(() => {}));
  return pipe.readable;
}

/** Writes bytes read before the pump into the client's pipe, ahead of it. */
async function writeFirst(pipe: ReadableWritablePair<Uint8Array, Uint8Array>, first: FirstBytes): Promise<void> {
  const writer = pipe.writable.getWriter();
  try {
    await writer.write(first.chunk);
  } finally {
    writer.releaseLock();
  }
}

/**
 * Pumps `source` into the client's pipe natively once `first` settles, and reports how it ended:
 * normally, upstream failure (an SSE body then gets an error event), or the client gone
 * (`cancel` stops the upstream body, and onClientGone the upstream request).
 */
function pumpToClient(
  source: ReadableStream<Uint8Array>,
  o: RelayOptions,
  pipe: ReadableWritablePair<Uint8Array, Uint8Array>,
  first: Promise<void>,
  on: { end: (outcome: CompletionSummary["outcome"]) => void; cancel: () => void; preventCancel?: boolean },
): void {
  const limit = o.readLimitMs === undefined ? undefined : setTimeout(() => o.onReadLimit?.(), o.readLimitMs);
  // A client gone before the first write leaves the writable errored: pipeTo then cancels the body
  // (unless preventCancel) and rejects.
  first
    .then(() => source.pipeTo(pipe.writable, { preventAbort: true, preventClose: true, preventCancel: on.preventCancel === true }))
    .then(
      () => {
        clearTimeout(limit);
        const writer = pipe.writable.getWriter();
        if (writer.desiredSize === null || o.clientGone?.()) return on.end("client-abort");
        writer.close().catch(() => {});
        on.end("ok");
      },
      async (err: unknown) => {
        clearTimeout(limit);
        const writer = pipe.writable.getWriter();
        if (writer.desiredSize === null || o.clientGone?.()) {
          on.cancel();
          o.onClientGone?.();
          return on.end("client-abort");
        }
        on.end("upstream-error");
        try {
          if (o.sse) {
            // This path sees no bytes, so it cannot know whether the upstream stopped between events.
            // A blank line first ends any unfinished one: the error event is then parsed on its own
            // (after the broken event when the cut fell inside one; the JavaScript path drops that).
            const message = `upstream stream failed: ${err instanceof Error ? err.message : String(err)}`;
            await writer.write(encoder.encode(`\n\n${sseErrorEvent(message, "upstream_stream_error", o.responses)}`));
            await writer.close();
          } else {
            await writer.abort(err);
          }
        } catch {
          // The client disconnected in the meantime: nothing left to tell it.
        }
      },
    );
}
