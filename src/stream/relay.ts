import { sseErrorEvent } from "../openai/errors.ts";
import type { ChunkTransform, CompletionSummary } from "../hooks/types.ts";
import { readUsage, TailKeeper } from "./usage.ts";

export interface RelayOptions {
  /** Per-chunk transforms from hooks; empty on the plain pass-through path. */
  transforms: ChunkTransform[];
  /** An SSE body gets an error event when the upstream dies mid-stream. */
  sse: boolean;
  /** When the upstream request went out, for time to first byte. */
  sentAt: number;
  now: () => number;
  onEnd: (summary: CompletionSummary) => void;
  /**
   * A byte pipe the runtime pumps without running JavaScript per chunk (workerd's
   * IdentityTransformStream). With it, and no transform, the body takes the fast path: nothing
   * per chunk at all, and the summary has no byte count, first-byte time or usage.
   */
  nativePipe?: () => ReadableWritablePair<Uint8Array, Uint8Array>;
  /** Whether the client has gone (request.signal in Workers); an errored pipe says so too. */
  clientGone?: () => boolean;
  /**
   * A stalled upstream: no byte for this long calls onIdle (which aborts the upstream fetch) and
   * the stream ends with an error event saying so. It needs every chunk seen, so it takes the
   * JavaScript path.
   */
  idleTimeoutMs?: number;
  onIdle?: () => void;
}

const TAIL_BYTES = 8192;
const encoder = new TextEncoder();

/**
 * Passes an upstream body to the client as it arrives. Per chunk it only notes the first
 * byte's time and keeps a reference for the tail, unless a hook asked for chunks. At the end it
 * reports how the body ended — normally, upstream failure (an SSE body then gets an error event
 * instead of a silent truncation), or client disconnect (the upstream body is cancelled).
 *
 * With hooks, one loop reads the upstream and writes what the hooks make of each chunk into a
 * pipe the runtime pumps to the client (nativePipe in Workers): the client side stays native, so
 * JavaScript runs once per chunk, where a TransformStream would also run it for the runtime's
 * pulls of a JavaScript-backed body.
 */
export function relay(body: ReadableStream<Uint8Array>, o: RelayOptions): ReadableStream<Uint8Array> {
  const pipe = o.nativePipe ? o.nativePipe() : new TransformStream<Uint8Array, Uint8Array>();
  if (o.transforms.length === 0 && o.nativePipe && !o.idleTimeoutMs) return relayNative(body, o, pipe);
  void pump(body, pipe.writable.getWriter(), o);
  return pipe.readable;
}

async function pump(body: ReadableStream<Uint8Array>, writer: WritableStreamDefaultWriter<Uint8Array>, o: RelayOptions): Promise<void> {
  const { transforms } = o;
  const tail = new TailKeeper(TAIL_BYTES);
  const reader = body.getReader();
  const idleMs = o.idleTimeoutMs;
  let idleTimer: ReturnType<typeof setTimeout> | undefined;
  let stalled = false;
  const armIdle = idleMs
    ? () => {
        clearTimeout(idleTimer);
        idleTimer = setTimeout(() => {
          stalled = true;
          o.onIdle?.();
        }, idleMs);
      }
    : null;
  let bytes = 0;
  let firstAt: number | null = null;
  const summary = (outcome: CompletionSummary["outcome"]): CompletionSummary => ({
    outcome,
    bytes,
    usage: outcome === "client-abort" ? null : readUsage(tail.bytesView()),
    ttftMs: firstAt === null ? null : firstAt - o.sentAt,
  });
  /** Writes to the client; false once it went away (the upstream is then cancelled). */
  const send = async (chunk: Uint8Array | null): Promise<boolean> => {
    try {
      if (chunk && chunk.length > 0) await writer.write(chunk);
      return true;
    } catch {
      return false;
    }
  };
  const flushHooks = async (): Promise<boolean> => {
    for (const t of transforms) if (!(await send(t.flush()))) return false;
    return true;
  };

  for (;;) {
    let step: ReadableStreamReadResult<Uint8Array>;
    // The idle timer runs only while the upstream owes bytes: a slow client is not a stalled upstream.
    armIdle?.();
    try {
      step = await reader.read();
      clearTimeout(idleTimer);
    } catch (err) {
      clearTimeout(idleTimer);
      if (o.clientGone?.()) {
        writer.abort().catch(() => {});
        return o.onEnd(summary("client-abort"));
      }
      o.onEnd(summary("upstream-error"));
      if (!o.sse) {
        writer.abort(err).catch(() => {});
        return;
      }
      const message = stalled
        ? `upstream stream stalled: no bytes for ${idleMs} ms after ${bytes} bytes`
        : `upstream stream failed after ${bytes} bytes: ${err instanceof Error ? err.message : String(err)}`;
      if ((await flushHooks()) && (await send(encoder.encode(sseErrorEvent(message, stalled ? "upstream_stream_stalled" : "upstream_stream_error"))))) {
        writer.close().catch(() => {});
      }
      return;
    }
    if (step.done) break;
    const chunk = step.value;
    if (firstAt === null) firstAt = o.now();
    bytes += chunk.length;
    tail.push(chunk);
    let out = chunk;
    for (const t of transforms) out = t.transform(out);
    if (!(await send(out))) {
      clearTimeout(idleTimer);
      reader.cancel().catch(() => {});
      return o.onEnd(summary("client-abort"));
    }
  }
  clearTimeout(idleTimer);
  if (!(await flushHooks())) return o.onEnd(summary("client-abort"));
  writer.close().catch(() => {});
  o.onEnd(summary("ok"));
}

/**
 * The fast path: the runtime pumps upstream bytes into the client's stream natively; JavaScript
 * runs once, when the pipe settles, to learn how the body ended and release the lease.
 */
function relayNative(body: ReadableStream<Uint8Array>, o: RelayOptions, pipe: ReadableWritablePair<Uint8Array, Uint8Array>): ReadableStream<Uint8Array> {
  const end = (outcome: CompletionSummary["outcome"]) => o.onEnd({ outcome, bytes: null, usage: null, ttftMs: null });
  body.pipeTo(pipe.writable, { preventAbort: true, preventClose: true }).then(
    () => {
      const writer = pipe.writable.getWriter();
      if (writer.desiredSize === null || o.clientGone?.()) return end("client-abort");
      writer.close().catch(() => {});
      end("ok");
    },
    async (err: unknown) => {
      const writer = pipe.writable.getWriter();
      if (writer.desiredSize === null || o.clientGone?.()) return end("client-abort");
      end("upstream-error");
      try {
        if (o.sse) {
          const message = `upstream stream failed: ${err instanceof Error ? err.message : String(err)}`;
          await writer.write(encoder.encode(sseErrorEvent(message, "upstream_stream_error")));
          await writer.close();
        } else {
          await writer.abort(err);
        }
      } catch {
        // The client disconnected in the meantime: nothing left to tell it.
      }
    },
  );
  return pipe.readable;
}
