import { describe, expect, it } from "vitest";
import type { CompletionSummary } from "../../src/hooks/types.ts";
import { relay } from "../../src/stream/relay.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

function source(chunks: string[], opts: { failAfter?: number; onCancel?: () => void } = {}): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      if (opts.failAfter !== undefined && i === opts.failAfter) return c.error(new Error("connection reset"));
      const next = chunks[i++];
      if (next === undefined) c.close();
      else c.enqueue(enc.encode(next));
    },
    cancel() {
      opts.onCancel?.();
    },
  });
}

/** An upstream that never ends on its own; says whether it was cancelled. */
function endlessSource(): { endless: ReadableStream<Uint8Array>; cancelled: () => boolean } {
  let cancelled = false;
  const endless = new ReadableStream<Uint8Array>({
    pull: (c) => new Promise((r) => setTimeout(() => r(cancelled ? undefined : c.enqueue(enc.encode("data: {}\n\n"))), 1)),
    cancel: () => void (cancelled = true),
  });
  return { endless, cancelled: () => cancelled };
}

function start(body: ReadableStream<Uint8Array>, sse = true): { out: ReadableStream<Uint8Array>; ended: Promise<CompletionSummary> } {
  let done!: (s: CompletionSummary) => void;
  const ended = new Promise<CompletionSummary>((r) => (done = r));
  const out = relay(body, { transforms: [], sse, sentAt: 0, now: () => 5, onEnd: done });
  return { out, ended };
}

const usageEvent = 'data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":4,"total_tokens":104,"prompt_tokens_details":{"cached_tokens":64}}}\n\n';

describe("relay", () => {
  it("passes bytes through unchanged and reads the final usage event", async () => {
    const chunks = ['data: {"a":1}\n\n', 'data: {"b":2}\n\n', usageEvent, "data: [DONE]\n\n"];
    const { out, ended } = start(source(chunks));
    expect(await new Response(out).text()).toBe(chunks.join(""));
    const s = await ended;
    expect(s.outcome).toBe("ok");
    expect(s.bytes).toBe(enc.encode(chunks.join("")).length);
    expect(s.ttftMs).toBe(5);
    expect(s.usage).toEqual({ promptTokens: 100, completionTokens: 4, cachedTokens: 64 });
  });

  it("ends a stream whose upstream dies with an SSE error event", async () => {
    const { out, ended } = start(source(['data: {"a":1}\n\n', 'data: {"b":2}\n\n'], { failAfter: 2 }));
    const text = await new Response(out).text();
    expect(text.startsWith('data: {"a":1}\n\ndata: {"b":2}\n\n')).toBe(true);
    const last = JSON.parse(text.trim().split("\n\n").at(-1)?.slice("data: ".length) ?? "{}") as { error?: { code?: string } };
    expect(last.error?.code).toBe("upstream_stream_error");
    expect((await ended).outcome).toBe("upstream-error");
  });

  it("errors a non-streamed body whose upstream dies", async () => {
    const { out, ended } = start(source(['{"id":'], { failAfter: 1 }), false);
    await expect(new Response(out).text()).rejects.toThrow();
    expect((await ended).outcome).toBe("upstream-error");
  });

  it("cancels the upstream when the client goes away", async () => {
    const { endless, cancelled } = endlessSource();
    const { out, ended } = start(endless);
    const reader = out.getReader();
    expect(dec.decode((await reader.read()).value)).toBe("data: {}\n\n");
    await reader.cancel();
    expect((await ended).outcome).toBe("client-abort");
    expect(cancelled()).toBe(true);
  });
});

describe("relay, fast path (a natively pumped pipe, no transforms)", () => {
  function startNative(body: ReadableStream<Uint8Array>, sse = true) {
    let done!: (s: CompletionSummary) => void;
    const ended = new Promise<CompletionSummary>((r) => (done = r));
    const out = relay(body, { transforms: [], sse, sentAt: 0, now: () => 5, onEnd: done, nativePipe: () => new TransformStream<Uint8Array, Uint8Array>() });
    return { out, ended };
  }

  it("passes bytes through unchanged and counts nothing", async () => {
    const chunks = ['data: {"a":1}\n\n', usageEvent, "data: [DONE]\n\n"];
    const { out, ended } = startNative(source(chunks));
    expect(await new Response(out).text()).toBe(chunks.join(""));
    expect(await ended).toEqual({ outcome: "ok", bytes: null, usage: null, ttftMs: null });
  });

  it("ends a stream whose upstream dies with an SSE error event", async () => {
    const { out, ended } = startNative(source(['data: {"a":1}\n\n'], { failAfter: 1 }));
    const text = await new Response(out).text();
    expect(text.startsWith('data: {"a":1}\n\n')).toBe(true);
    expect(text).toContain('"code":"upstream_stream_error"');
    expect((await ended).outcome).toBe("upstream-error");
  });

  it("cancels the upstream when the client goes away", async () => {
    const { endless, cancelled } = endlessSource();
    const { out, ended } = startNative(endless);
    const reader = out.getReader();
    await reader.read();
    await reader.cancel();
    expect((await ended).outcome).toBe("client-abort");
    expect(cancelled()).toBe(true);
  });
});
