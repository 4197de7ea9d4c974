import { describe, expect, it } from "vitest";
import { renderReport } from "../../bench/routing/report.ts";
import { shardPairs, shardPairsLine } from "../../bench/routing/shard-pairs.ts";
import type { RoutingResults } from "../../bench/routing/types.ts";
import { routingRun } from "../support/routing-runs.ts";

const hit = (strategy: string, seed: number, kv_hit: number | null) => ({ strategy, seed, kv_hit });

describe("bench:routing's kv_hit over shards against one object's", () => {
  it("pairs each sharded run with one object's run of the same seed, not median against median", () => {
    // Seed 2's traffic caches twice as well as seed 1's: medians of each side would call a loss on
    // every seed a gain (one object's median 0.1 against the shards' 0.18).
    const runs = [hit("prefix-aware", 1, 0.1), hit("prefix-aware", 2, 0.2), hit("prefix-aware", 3, 0.1), hit("prefix-aware@2", 1, 0.09), hit("prefix-aware@2", 2, 0.18), hit("prefix-aware@2", 3, 0.2)];
    const [pair] = shardPairs(runs);
    expect(pair?.router).toBe("prefix-aware@2");
    expect(pair?.changes.map((c) => Number(c.toFixed(3)))).toEqual([-0.1, -0.1, 1]);
    expect(pair?.median).toBeCloseTo(-0.1, 9);
    expect(pair?.mean).toBeCloseTo(0.8 / 3, 9);
  });

  it("leaves out a seed one object did not run, and orders routers by their shards", () => {
    const runs = [hit("prefix-aware@4", 1, 0.11), hit("prefix-aware", 1, 0.1), hit("prefix-aware@2", 1, 0.1), hit("prefix-aware@2", 2, 0.5), hit("least-loaded", 1, 0.3), hit("prefix-aware", 3, null)];
    const pairs = shardPairs(runs);
    expect(pairs.map((p) => p.router)).toEqual(["prefix-aware@2", "prefix-aware@4"]);
    expect(pairs[0]?.changes).toEqual([0]);
    expect(pairs[1]?.changes[0]).toBeCloseTo(0.1, 9);
  });

  it("writes a change that rounds to nothing without a sign", () => {
    expect(shardPairsLine([hit("prefix-aware", 1, 0.1), hit("prefix-aware@2", 1, 0.09999)])).toContain("prefix-aware@2 median 0.0%, mean 0.0% (per seed 0.0%)");
  });

  it("gives both middle changes of an even count of seeds", () => {
    const runs = [1, 2, 3, 4].flatMap((seed) => [hit("prefix-aware", seed, 0.1), hit("prefix-aware@2", seed, [0.086, 0.093, 0.107, 0.108][seed - 1] as number)]);
    expect(shardPairs(runs)[0]?.median).toBeCloseTo(-0.07, 9);
    expect(shardPairsLine(runs)).toContain("prefix-aware@2 median between −7.0% and +7.0%, mean −1.5%");
  });

  it("says nothing for a point without sharded runs", () => {
    expect(shardPairsLine([hit("prefix-aware", 1, 0.1), hit("least-loaded", 1, 0.2)])).toBeNull();
  });

  it("puts the paired changes under each closed-loop point in routing.md", () => {
    const runs = [1, 2, 3].flatMap((seed) => [
      routingRun("prefix-aware", 8, seed, 50, 100, { kv_hit: 0.9 }),
      routingRun("prefix-aware@2", 8, seed, 50, 100, { kv_hit: seed === 3 ? 0.99 : 0.891 }),
    ]);
    const results: RoutingResults = {
      command: "npm run bench:routing",
      date: "2026-11-24T00:00:00.000Z",
      quick: false,
      regimes: [{ name: "roomy", preset: "a100-7b", time_scale: 1, kv_capacity_tokens_per_worker: 1000, workers: 4, sessions: [8], trace_options: {} }],
      footprints: [],
      ceilings: [],
      error_samples: [],
      runs,
    };
    expect(renderReport(results)).toContain("- 8 sessions: kv_hit over shards against one object's (`prefix-aware`), paired by seed: prefix-aware@2 median −1.0%, mean +2.7% (per seed −1.0%, −1.0%, +10.0%).");
  });
});
