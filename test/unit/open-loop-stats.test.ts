import { describe, expect, it } from "vitest";
import { DEFAULT_SLO_TTFT_MS, summarizeOpenLoop, type OpenLoopRequest, type OpenLoopResult } from "../../bench/replay/index.ts";

function request(index: number, over: Partial<OpenLoopRequest>): OpenLoopRequest {
  return {
    session: `r${index}`,
    turn: 0,
    status: 200,
    error: null,
    ttftMs: 100,
    totalMs: 500,
    promptTokens: 1000,
    cachedTokens: 500,
    completionTokens: 10,
    backend: null,
    reason: null,
    index,
    outcome: "sent",
    scheduledMs: index * 1000,
    readyMs: index * 1000,
    sentMs: index * 1000,
    ...over,
  };
}

const notSent = { outcome: "overflow", status: 0, error: "not sent", ttftMs: null, promptTokens: null, cachedTokens: null, completionTokens: null, sentMs: null } as const;

describe("open-loop summary", () => {
  const result: OpenLoopResult = {
    wallMs: 10_000,
    serverQueue: null,
    requests: [
      request(0, { ttftMs: 1999 }),
      request(1, { ttftMs: 2000, sentMs: 1030 }), // exactly at the objective: it counts; sent 30 ms late
      request(2, { ttftMs: 2001, cachedTokens: 0 }), // a miss of the objective
      request(3, { error: "HTTP 500: boom", status: 500, ttftMs: null, promptTokens: null, cachedTokens: null }), // failed: never good
      request(4, notSent),
      request(5, { ...notSent, outcome: "cut" }),
      request(6, { turn: 1, scheduledMs: 6000, readyMs: 6400, sentMs: 6410 }), // held 400 ms by its earlier turn
      request(7, { ttftMs: 50, scheduledMs: 9000, readyMs: 9000, sentMs: 9000 }),
    ],
  };
  // The ideal cache holds half of every prompt.
  const s = summarizeOpenLoop(result, { kvCeiling: { cached: result.requests.map(() => 500), prompt: result.requests.map(() => 1000) } });

  it("counts outcomes: sent, completed, failed, overflow, cut", () => {
    expect(s).toMatchObject({ requests: 8, sent: 6, completed: 5, errors: 1, overflow: 1, cut: 1 });
  });

  it("counts goodput over every request of the trace, at the objective inclusive, per second of the run", () => {
    expect(DEFAULT_SLO_TTFT_MS).toBe(2000);
    expect(s.goodput).toEqual({ slo_ttft_ms: 2000, requests: 4, share: 0.5, per_s: 0.4 });
    expect(summarizeOpenLoop(result, { sloTtftMs: 60 }).goodput.requests).toBe(1);
  });

  it("reads TTFT of the requests sent (a failure without a first token has none), kv_hit of the completed ones, against the ceiling", () => {
    expect(s.ttft_ms).toEqual({ p50: 1999, p95: 2001, p99: 2001 });
    expect(s.kv_hit).toBeCloseTo(2000 / 5000, 12);
    expect(s.kv_ceiling).toBeCloseTo(0.5, 12);
    expect(s.kv_hit_of_ceiling).toBeCloseTo(0.8, 12);
  });

  it("shows a client falling behind its schedule apart from a follow-up held by its turn", () => {
    expect(s.queueing.send_lag_ms).toMatchObject({ p50: 0, max: 30 });
    expect(s.queueing.held_for_previous_turn).toBe(1);
    expect(s.queueing.held_ms.p50).toBe(400);
    expect(s.queueing.server).toBeNull();
    expect(s.offered_rps).toBeCloseTo(7 / 9, 12);
  });
});

describe("open-loop summary of requests that timed out", () => {
  const timedOut = { error: "timed out after 60000 ms", ttftMs: null, timedOutMs: 60_000, promptTokens: null, cachedTokens: null, completionTokens: null } as const;
  const run = (requests: OpenLoopRequest[]): OpenLoopResult => ({ wallMs: 100_000, serverQueue: null, requests });

  it("ranks a timeout above every answer: 100 requests with the 5 slowest timed out do not have a lower p95 than all answered", () => {
    // The review's demo: TTFTs 0.1 … 10 s; router B's 5 slowest requests time out (60 s) instead.
    const a = summarizeOpenLoop(run(Array.from({ length: 100 }, (_, i) => request(i, { ttftMs: (i + 1) * 100 }))));
    const b = summarizeOpenLoop(run(Array.from({ length: 100 }, (_, i) => request(i, i < 95 ? { ttftMs: (i + 1) * 100 } : timedOut))));
    expect(a.ttft_ms).toEqual({ p50: 5000, p95: 9500, p99: 9900 });
    // Left out, the 95 answers alone gave B a p95 of 9,100 and a p99 of 9,500: lower than A's.
    expect(b.ttft_ms.p95).toBeGreaterThanOrEqual(a.ttft_ms.p95 as number);
    expect(b.ttft_ms.p99).toBeGreaterThanOrEqual(a.ttft_ms.p99 as number);
    // p99 falls among the timeouts: it is their bound, given as a lower bound.
    expect(b.ttft_ms).toEqual({ p50: 5000, p95: 9500, p99: 60_000, censored: 5, at_least: ["p99"] });
    expect(b.errors).toBe(5);
  });

  it("keeps the TTFT of a request whose first token came before it timed out or broke off, and leaves out one that failed before it otherwise", () => {
    const s = summarizeOpenLoop(
      run([
        request(0, { ttftMs: 100 }),
        request(1, { ...timedOut, ttftMs: 300 }), // its first token came; the rest did not in time
        request(2, { error: "stream ended without [DONE]", ttftMs: 200, promptTokens: null }), // broke off after its first token
        request(3, { error: "HTTP 503: no backend", status: 503, ttftMs: null, promptTokens: null }), // no time and no bound
      ]),
    );
    expect(s.ttft_ms).toEqual({ p50: 200, p95: 300, p99: 300 });
    expect(s.goodput.requests).toBe(1);
  });

  it("takes kv_hit and its ceiling over the same requests: those answered with their usage", () => {
    const s = summarizeOpenLoop(
      run([
        request(0, { promptTokens: 1000, cachedTokens: 0 }),
        request(1, { promptTokens: 1000, cachedTokens: 400 }),
        request(2, timedOut), // the ideal cache holds most of it, but its usage never came
        request(3, { promptTokens: 1000, cachedTokens: 50 }),
      ]),
      { kvCeiling: { cached: [0, 500, 900, 100], prompt: [1000, 1000, 1000, 1000] } },
    );
    expect(s.kv_hit).toBeCloseTo(450 / 3000, 12);
    // Over the same three requests: 600 / 3000, not every request's 1500 / 4000.
    expect(s.kv_ceiling).toBeCloseTo(600 / 3000, 12);
    expect(s.kv_hit_of_ceiling).toBeCloseTo(0.75, 12);
    expect(s.kv_ceiling_trace).toBeCloseTo(1500 / 4000, 12);
  });
});
