import { describe, expect, it } from "vitest";
import { runVirtualPoint, virtualGroup } from "../../bench/virtual/point.ts";

/**
 * What moves a prompt off the backend or shard holding its prefix by in-flight counts alone,
 * through kvgate's routing code and the fleet simulator's engine in virtual time (bench/virtual/),
 * on llm-d's b2b-saas shape as bench:routing replays it: 150 group prompts of 6,000 tokens whose
 * working set all but fills the fleet's four caches, in Poisson bursts. At a valve of 32 in
 * flight, a group's backend at 32 passed its next questions to another, which copied the group
 * prompt and evicted another group's: kv_hit 0.886 of the ceiling on this seed (0.868 over 3 seeds
 * × 4 draws), TTFT p50 113 ms. At the engines' own limit (vLLM's max_num_seqs, 256) a group's
 * questions stay on its backend while its queued prompt work says so: 1.000 of the ceiling here.
 *
 * A sharded group's bounded loads did the same between shards: at `balanceAbs` 4, over 4 shards
 * of one worker each, 0.82 of the ceiling on this seed; at 64 (SGLang's router's
 * balance_abs_threshold), 0.90. Mooncake over 4 shards (6 slices × 3 draws): 0.953 → 1.002 × one
 * object's kv_hit.
 */
// Each run replays ~2,000 requests through the routing code and the engine model: a few seconds
// alone, several times that on a shared machine running other suites beside it.
const RUN = { timeout: 60_000 };

describe("the bounds that spill a burst, in virtual time", () => {
  it("default to the engines' concurrent-sequence limit and SGLang's balance threshold, not counts a burst reaches", () => {
    const group = virtualGroup("prefix-aware", { preset: "a100-7b", timeScale: 1 }, 1);
    expect(group.saturation).toBe(256);
    expect(group.balanceAbs).toBe(64);
  });

  it("keeps a burst of group prompts on their backends: b2b-saas's kv_hit at the ceiling", RUN, () => {
    const run = runVirtualPoint({ trace: "b2b-saas", seed: 3, strategy: "prefix-aware", shards: 1, jitterSeed: 1, hopMs: 20 });
    expect(run.errors).toBe(0);
    expect(run.kv_ceiling).toBeGreaterThan(0.85);
    expect((run.kv_hit ?? 0) / (run.kv_ceiling ?? NaN)).toBeGreaterThanOrEqual(0.97);
  });

  it("keeps a burst of group prompts on their shards: b2b-saas over 4 shards near the ceiling", RUN, () => {
    const run = runVirtualPoint({ trace: "b2b-saas", seed: 3, strategy: "prefix-aware", shards: 4, jitterSeed: 1, hopMs: 20 });
    expect(run.errors).toBe(0);
    expect((run.kv_hit ?? 0) / (run.kv_ceiling ?? NaN)).toBeGreaterThanOrEqual(0.88);
  });
});
