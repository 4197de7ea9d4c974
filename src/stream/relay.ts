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
 */
export function relay(body: ReadableStream<Uint8Array>, o: RelayOptions): ReadableStream<Uint8Array> {
  if (o.transforms.length === 0 && o.nativePipe && !o.idleTimeoutMs) return relayNative(body, o, o.nativePipe());
  const tail = new TailKeeper(TAIL_BYTES);
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
  const transforms = o.transforms;
  let bytes = 0;
  let firstAt: number | null = null;
  let controller: TransformStreamDefaultController<Uint8Array> | undefined;
  let clientGone = false;

  // `cancel` is in the Streams standard and in workerd and Node, not yet in TypeScript's lib.
  const transformer: Transformer<Uint8Array, Uint8Array> & { cancel(reason: unknown): void } = {
    start(c) {
      controller = c;
      armIdle?.();
    },
    transform(chunk, c) {
      armIdle?.();
      if (firstAt === null) firstAt = o.now();
      bytes += chunk.length;
      tail.push(chunk);
      let out = chunk;
      for (const t of transforms) out = t.transform(out);
      if (out.length > 0) c.enqueue(out);
    },
    // The client went away. pipeTo then cancels the upstream body, and may settle either way
    // (workerd resolves it), so this flag, not the settlement, says what happened.
    cancel() {
      clientGone = true;
    },
    flush(c) {
      for (const t of transforms) {
        const rest = t.flush();
        if (rest && rest.length > 0) c.enqueue(rest);
      }
    },
  };
  const ts = new TransformStream<Uint8Array, Uint8Array>(transformer);

  const summary = (outcome: CompletionSummary["outcome"]): CompletionSummary => ({
    outcome,
    bytes,
    usage: outcome === "client-abort" ? null : readUsage(tail.bytesView()),
    ttftMs: firstAt === null ? null : firstAt - o.sentAt,
  });

  body.pipeTo(ts.writable, { preventAbort: true, preventClose: true }).then(
    () => {
      clearTimeout(idleTimer);
      if (clientGone) return o.onEnd(summary("client-abort"));
      const writer = ts.writable.getWriter();
      writer.close().catch(() => {});
      o.onEnd(summary("ok"));
    },
    (err: unknown) => {
      clearTimeout(idleTimer);
      const writer = ts.writable.getWriter();
      // An errored writable also means the client went away; otherwise the upstream failed.
      if (clientGone || writer.desiredSize === null || o.clientGone?.()) {
        o.onEnd(summary("client-abort"));
        return;
      }
      writer.releaseLock();
      const c = controller as TransformStreamDefaultController<Uint8Array>;
      if (o.sse) {
        const message = stalled
          ? `upstream stream stalled: no bytes for ${idleMs} ms after ${bytes} bytes`
          : `upstream stream failed after ${bytes} bytes: ${err instanceof Error ? err.message : String(err)}`;
        try {
          for (const t of transforms) {
            const rest = t.flush();
            if (rest && rest.length > 0) c.enqueue(rest);
          }
          c.enqueue(encoder.encode(sseErrorEvent(message, stalled ? "upstream_stream_stalled" : "upstream_stream_error")));
          c.terminate();
        } catch {
          // The client disconnected in the meantime: nothing left to tell it.
        }
      } else {
        c.error(err);
      }
      o.onEnd(summary("upstream-error"));
    },
  );
  return ts.readable;
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
