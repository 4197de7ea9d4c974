import { describe, expect, it } from "vitest";
import { mergeBase, mergeConflict, mixedPoints, runKey } from "../../bench/routing/merge.ts";
import { renderReport } from "../../bench/routing/report.ts";
import type { RoutingResults, RoutingRun } from "../../bench/routing/types.ts";
import { TTFT_RULE } from "../../bench/replay/index.ts";
import { routingRun } from "../support/routing-runs.ts";

const run = (strategy: string, sessions: number, seed: number, commit: string): RoutingRun => routingRun(strategy, sessions, seed, 50, 100, { commit });

function results(runs: RoutingRun[], extra: Partial<RoutingResults> = {}): RoutingResults {
  return {
    command: "npm run bench:routing",
    date: "2026-11-23T00:00:00.000Z",
    quick: false,
    regimes: [{ name: "roomy", preset: "a100-7b", time_scale: 1, kv_capacity_tokens_per_worker: 1000, workers: 4, sessions: [4, 8], trace_options: {} }],
    footprints: [],
    ceilings: [{ regime: "roomy", trace: "multi-turn", sessions: 4, seed: 1, kv_hit: 0.95 }],
    error_samples: [{ regime: "roomy", trace: "multi-turn", strategy: "prefix-aware", sessions: 8, seed: 1, status: 500, error: "old" }],
    peers: [{ name: "sglang-cache_aware", package: "sglang-router", version: "0.3.2", settings: "defaults" }],
    warm_up_requests: 8,
    runs,
    ...extra,
  };
}

const key = (strategy: string, sessions: number, seed: number) => runKey({ regime: "roomy", trace: "multi-turn", strategy, sessions, seed });

describe("bench:routing --merge: the results already written, less the points this run makes again", () => {
  it("keeps every other point's runs, ceilings and peers, drops the planned points' runs and error samples, and lists the parts", () => {
    const prior = results([run("prefix-aware", 4, 1, "aaa"), run("least-loaded", 4, 1, "aaa"), run("prefix-aware", 8, 1, "aaa"), run("least-loaded", 8, 1, "aaa")]);
    const fresh = results([], { command: "npm run bench:routing -- --sessions 8 --merge", date: "2026-11-24T00:00:00.000Z", ceilings: [], error_samples: [], peers: [], parts: [{ command: "npm run bench:routing -- --sessions 8 --merge", date: "2026-11-24T00:00:00.000Z", commit: "bbb" }] });
    const merged = mergeBase(prior, fresh, new Set([key("prefix-aware", 8, 1), key("least-loaded", 8, 1)]));
    expect(merged.runs.map((r) => `${r.strategy}@${r.sessions}`)).toEqual(["prefix-aware@4", "least-loaded@4"]);
    expect(merged.ceilings).toEqual(prior.ceilings);
    expect(merged.error_samples).toEqual([]);
    expect(merged.peers?.map((p) => p.name)).toEqual(["sglang-cache_aware"]);
    expect(merged.command).toBe(fresh.command);
    // Results that predate parts count as one part, of an unrecorded commit.
    expect(merged.parts?.map((p) => p.commit)).toEqual([null, "bbb"]);
  });

  it("refuses results made another way: quick against full, other regimes, another warm-up", () => {
    const prior = results([]);
    expect(mergeConflict(prior, results([]))).toBeNull();
    expect(mergeConflict(prior, results([], { quick: true }))).toMatch(/full ones and this run is --quick/);
    expect(mergeConflict(prior, results([], { regimes: [] }))).toMatch(/other regimes/);
    expect(mergeConflict(prior, results([], { warm_up_requests: 0 }))).toMatch(/another warm-up/);
  });

  it("refuses a part that counts TTFT by another rule than the results there: one report, one rule, every comparison within it", () => {
    const counted = { ttft_rule: TTFT_RULE };
    // Results made before timeouts were counted, and a run that counts them.
    expect(mergeConflict(results([]), results([], counted))).toMatch(/without the requests that timed out/);
    expect(mergeConflict(results([], counted), results([], { ttft_rule: "another rule" }))).toMatch(/by another rule/);
    expect(mergeConflict(results([], counted), results([], counted))).toBeNull();
  });

  it("the report says which commits made the runs, and counts the points whose routers' runs cross parts", () => {
    const at = (r: RoutingRun, time: string): RoutingRun => ({ ...r, at: time });
    const runs = [at(run("prefix-aware", 4, 1, "aaa"), "2026-11-24T01:00:00Z"), at(run("least-loaded", 4, 1, "aaa"), "2026-11-24T01:01:00Z"), at(run("prefix-aware", 8, 1, "bbb"), "2026-11-24T02:00:00Z"), at(run("least-loaded", 8, 1, "bbb"), "2026-11-24T02:01:00Z")];
    const parts = [
      { command: "npm run bench:routing -- --sessions 4", date: "2026-11-24T00:59:00Z", commit: "aaa" },
      { command: "npm run bench:routing -- --sessions 8 --merge", date: "2026-11-24T01:59:00Z", commit: "bbb" },
    ];
    expect(mixedPoints(runs, parts)).toBe(0);
    const md = renderReport(results(runs, { parts }));
    expect(md).toContain("Made in 2 parts (`--merge`)");
    expect(md).toContain("every point's routers ran together");
    expect(md).toContain("aaa (2 runs), bbb (2 runs)");
    // A third part, at the same commit, remade one router of the 8-session point.
    const third = [...parts, { command: "npm run bench:routing -- --sessions 8 --strategy least-loaded --merge", date: "2026-11-24T03:00:00Z", commit: "bbb" }];
    const crossing = [...runs.slice(0, 3), at(run("least-loaded", 8, 1, "bbb"), "2026-11-24T03:01:00Z")];
    expect(mixedPoints(crossing, third)).toBe(1);
    expect(renderReport(results(crossing, { parts: third }))).toContain("**1 point has runs from more than one part**: its comparisons cross parts");
    expect(renderReport(results(runs))).not.toContain("Made in");
  });

  it("counts a point once however many seeds it has: a point is its regime, trace and sessions", () => {
    const at = (r: RoutingRun, time: string): RoutingRun => ({ ...r, at: time });
    const parts = [
      { command: "npm run bench:routing", date: "2026-11-24T00:59:00Z", commit: "aaa" },
      { command: "npm run bench:routing -- --strategy prefix-aware --merge", date: "2026-11-24T01:59:00Z", commit: "bbb" },
    ];
    // Both seeds of the 8-session point have prefix-aware remade in the second part: one point crosses parts.
    const runs = [1, 2].flatMap((seed) => [at(run("least-loaded", 8, seed, "aaa"), "2026-11-24T01:00:00Z"), at(run("prefix-aware", 8, seed, "bbb"), "2026-11-24T02:00:00Z")]);
    expect(mixedPoints(runs, parts)).toBe(1);
  });
});
