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

  /**
   * llm-d's b2b-saas shape (open loop, its ramp to saturation): before 165bf12 and 9e55cc4 every
   * answer read cost seed 1 0.936 → 0.874 of the ceiling's kv_hit. Misses on what the prefix set
   * was about to evict too walked a right capacity by ×2 both ways, and an overload's waits, which
   * the router's prefill debt does not count, were learned as a prefill rate as slow as 1/9 of the
   * engine's.
   */
  it("costs b2b-saas nothing: a right capacity and rate stay where they were configured", { timeout: 120_000 }, () => {
    const b2b = { trace: "b2b-saas", regime: undefined, sessions: undefined, hopMs: 1, learningPass: false } as const;
    const off = runVirtualPoint(point({ ...b2b, feedback: false }));
    const on = runVirtualPoint(point({ ...b2b, feedback: true }));
    expect(on.errors).toBe(off.errors);
    expect(on.kv_hit).toBeCloseTo(off.kv_hit ?? NaN, 3);
    for (const l of on.learned ?? []) {
      expect(l.kvCapacityBlocks).toBe(l.configured.kvCapacityBlocks);
      expect(l.prefillTokensPerSec).toBe(l.configured.prefillTokensPerSec);
    }
    expect(on.learned).toHaveLength(4);
  });
});
