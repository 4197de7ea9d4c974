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
      request(3, { error: "HTTP 500: boom", status: 500, ttftMs: 10, promptTokens: null, cachedTokens: null }), // failed: never good
      request(4, notSent),
      request(5, { ...notSent, outcome: "cut" }),
      request(6, { turn: 1, scheduledMs: 6000, readyMs: 6400, sentMs: 6410 }), // held 400 ms by its earlier turn
      request(7, { ttftMs: 50, scheduledMs: 9000, readyMs: 9000, sentMs: 9000 }),
    ],
  };
  const s = summarizeOpenLoop(result, { kvCeiling: 0.5 });

  it("counts outcomes: sent, completed, failed, overflow, cut", () => {
    expect(s).toMatchObject({ requests: 8, sent: 6, completed: 5, errors: 1, overflow: 1, cut: 1 });
  });

  it("counts goodput over every request of the trace, at the objective inclusive, per second of the run", () => {
    expect(DEFAULT_SLO_TTFT_MS).toBe(2000);
    expect(s.goodput).toEqual({ slo_ttft_ms: 2000, requests: 4, share: 0.5, per_s: 0.4 });
    expect(summarizeOpenLoop(result, { sloTtftMs: 60 }).goodput.requests).toBe(1);
  });

  it("reads TTFT and kv_hit from completed requests only, against the ceiling", () => {
    expect(s.ttft_ms).toEqual({ p50: 1999, p95: 2001, p99: 2001 });
    expect(s.kv_hit).toBeCloseTo(2000 / 5000, 12);
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
