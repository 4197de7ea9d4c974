import { describe, expect, it } from "vitest";
import { backendShare, kvHit, summarize, type RequestResult } from "../../bench/replay/index.ts";

function request(overrides: Partial<RequestResult>): RequestResult {
  return {
    session: "s",
    turn: 0,
    status: 200,
    error: null,
    ttftMs: 10,
    totalMs: 20,
    promptTokens: 100,
    cachedTokens: 0,
    completionTokens: 8,
    backend: null,
    reason: null,
    ...overrides,
  };
}

describe("replay stats", () => {
  it("weighs the KV hit rate by tokens, over successful requests that reported usage", () => {
    const requests = [
      request({ promptTokens: 100, cachedTokens: 90 }),
      request({ promptTokens: 900, cachedTokens: 0 }),
      request({ promptTokens: 1000, cachedTokens: 1000, error: "HTTP 500: x" }),
      request({ promptTokens: null, cachedTokens: null }),
    ];
    expect(kvHit(requests)).toBeCloseTo(0.09);
    expect(kvHit([request({ promptTokens: null })])).toBeNull();
  });

  it("shares requests among backends, unknown when there is no header", () => {
    const share = backendShare([request({ backend: "b" }), request({ backend: "a" }), request({ backend: "a" }), request({})]);
    expect(share).toEqual({ a: 0.5, b: 0.25, unknown: 0.25 });
  });

  it("summarizes a replay in the results file's shape, latencies from successful requests only", () => {
    const requests = [
      request({ ttftMs: 30, totalMs: 300, promptTokens: 200, cachedTokens: 100, backend: "gpu-0" }),
      request({ ttftMs: 10, totalMs: 100, promptTokens: 200, cachedTokens: 150, backend: "gpu-1", turn: 1 }),
      request({ ttftMs: 20, totalMs: 200, promptTokens: 100, cachedTokens: 0, backend: "gpu-0" }),
      request({ status: 500, error: "HTTP 500: boom", ttftMs: null, totalMs: 1, promptTokens: null, cachedTokens: null, backend: "gpu-1" }),
    ];
    expect(summarize({ requests, wallMs: 1234 })).toEqual({
      requests: 4,
      errors: 1,
      kv_hit: 0.5,
      ttft_ms: { p50: 20, p95: 30, p99: 30 },
      ttft_later_turns_ms: { p50: 10, p95: 10, p99: 10 },
      total_ms: { p50: 200 },
      backend_share: { "gpu-0": 0.5, "gpu-1": 0.5 },
    });
  });

  it("counts a request that timed out before its first token as its timeout, above every answer, in both TTFT figures", () => {
    const requests = [
      request({ ttftMs: 10 }),
      request({ ttftMs: 20, turn: 1 }),
      request({ error: "timed out after 300000 ms", timedOutMs: 300_000, ttftMs: null, promptTokens: null, turn: 1 }),
      request({ error: "timed out after 300000 ms", timedOutMs: 300_000, ttftMs: 40, promptTokens: null, turn: 1 }), // its first token came
      request({ status: 500, error: "HTTP 500: boom", ttftMs: null, promptTokens: null }), // no time, no bound: left out
    ];
    const s = summarize({ requests, wallMs: 0 });
    expect(s.errors).toBe(3);
    expect(s.ttft_ms).toEqual({ p50: 20, p95: 300_000, p99: 300_000, censored: 1, at_least: ["p95", "p99"] });
    expect(s.ttft_later_turns_ms).toEqual({ p50: 40, p95: 300_000, p99: 300_000, censored: 1, at_least: ["p95", "p99"] });
    expect(s.total_ms.p50).toBe(20);
  });
});
