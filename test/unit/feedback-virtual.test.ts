import { describe, expect, it } from "vitest";
import { runVirtualPoint, type VirtualPoint } from "../../bench/virtual/point.ts";

/**
 * Feedback from the engines through kvgate's routing code and the fleet simulator's engine, in
 * virtual time (bench/virtual/), as bench:routing-feedback runs it on the fleet: the pressured
 * multi-turn trace at 32 sessions, a learning pass at another seed through the same gateway and
 * workers first, then the measured pass. On the fleet (routing-feedback.md at 2026-11-24), feedback
 * on cost the right configuration 0.906 → 0.873 kv_hit at 32 sessions: the prefill rate learned
 * from the opening burst's queued first turns, and from later turns too alike to tell a rate, was
 * 1/8× to 3× the engine's, so the prefill debt drained at the wrong speed and sessions were moved
 * off their cache (src/routing/learned/prefill-rate.ts, src/routing/feedback.ts).
 */
describe("feedback from the engines, in virtual time", () => {
  const point = (over: Partial<VirtualPoint>): VirtualPoint => ({ trace: "multi-turn", regime: "pressured", sessions: 32, seed: 1, strategy: "prefix-aware", shards: 1, jitterSeed: 1, hopMs: 2, learningPass: true, ...over });

  it("costs a right configuration nothing: every answer learned from, the same placement as with none read", () => {
    const off = runVirtualPoint(point({ feedback: false }));
    const on = runVirtualPoint(point({ feedback: true }));
    expect(on.strategy).toBe("prefix-aware+feedback");
    expect(on.errors).toBe(0);
    expect(on.kv_hit).toBeCloseTo(off.kv_hit ?? NaN, 3);
    expect(on.ttft_ms.p50).toBeLessThanOrEqual((off.ttft_ms.p50 ?? NaN) * 1.05);
  });
});
