import { describe, expect, it } from "vitest";
import { buildPipeline, buildUsagePipeline } from "../../src/hooks/index.ts";
import type { HookContext } from "../../src/hooks/types.ts";
import { usageHook } from "../../src/hooks/usage.ts";
import { hasUsageObject, UsageEventStripper } from "../../src/stream/strip-usage.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

const role = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":null}\n\n';
const token = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":null}\n\n';
const usage = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\n';
const done = "data: [DONE]\n\n";

function run(pieces: string[]): string {
  const s = new UsageEventStripper();
  let out = "";
  for (const p of pieces) out += dec.decode(s.transform(enc.encode(p)));
  const rest = s.flush();
  return out + (rest ? dec.decode(rest) : "");
}

describe("taking out the usage event the client did not ask for", () => {
  it("drops only the choices-empty usage event, wherever the chunks are cut", () => {
    const whole = role + token + usage + done;
    expect(run([whole])).toBe(role + token + done);
    // Cut at every byte: the same result.
    for (let cut = 1; cut < whole.length; cut += 7) expect(run([whole.slice(0, cut), whole.slice(cut)])).toBe(role + token + done);
  });

  it("leaves a chunk with usage and choices (continuous usage stats) and every usage:null", () => {
    const both = 'data: {"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\n';
    expect(run([role, both, done])).toBe(role + both + done);
  });

  it("finds a usage object with any JSON whitespace, and not a null one", () => {
    expect(hasUsageObject(enc.encode('{"usage" :\n {"prompt_tokens":1}}'))).toBe(true);
    expect(hasUsageObject(enc.encode('{"usage":null}'))).toBe(false);
    expect(hasUsageObject(enc.encode('{"content":"usage: {"}'))).toBe(false);
  });
});

describe("the usage hook", () => {
  const ctx = (over: Partial<HookContext> = {}): HookContext => ({ requestId: "r", group: "g", clientModel: "m", upstreamModel: "m", backendId: "b", stream: true, endpoint: "chat", ...over });

  it("asks a stream for its usage, and strips it only when the client did not ask", () => {
    const c = ctx();
    // continuous_usage_stats means nothing without include_usage (vLLM): kept, it would put a usage on every chunk.
    const body: Record<string, unknown> = { stream_options: { include_obfuscation: false, continuous_usage_stats: true } };
    usageHook.onRequest?.(body, c);
    expect(body.stream_options).toEqual({ include_obfuscation: false, include_usage: true });
    expect(usageHook.onChunk?.(c)).toBeInstanceOf(UsageEventStripper);
    const asked = ctx();
    usageHook.onRequest?.({ stream_options: { include_usage: true } }, asked);
    expect(usageHook.onChunk?.(asked)).toBeNull();
  });

  it("leaves non-streamed requests and endpoints without a usage event alone, and still reads their usage", () => {
    for (const c of [ctx({ stream: false }), ctx({ endpoint: "responses" }), ctx({ endpoint: "embeddings", stream: false })]) {
      const body: Record<string, unknown> = {};
      usageHook.onRequest?.(body, c);
      expect(body).toEqual({});
      expect(usageHook.onChunk?.(c)).toBeNull();
    }
    expect(buildUsagePipeline(["restamp"]).readsUsage).toBe(true);
    expect(buildPipeline(["restamp"]).readsUsage).toBe(false);
    expect(buildUsagePipeline(["restamp"]).chunk.map((h) => h.name)).toEqual(["usage", "restamp"]);
  });
});
