import { describe, expect, it } from "vitest";
import { renderReport } from "../../bench/routing/report.ts";
import type { RoutingResults } from "../../bench/routing/types.ts";
import { routingRun } from "../support/routing-runs.ts";

describe("routing.md's kv_hit ceiling column", () => {
  it("is the median of the seeds' ceilings, as the cells are medians, so a router at the ceiling in every seed is not shown above it", () => {
    const ceilings = [0.9, 0.95, 0.93];
    const results: RoutingResults = {
      command: "npm run bench:routing",
      date: "2026-12-05T00:00:00.000Z",
      quick: false,
      regimes: [{ name: "roomy", preset: "a100-7b", time_scale: 1, kv_capacity_tokens_per_worker: 1000, workers: 4, sessions: [8], trace_options: {} }],
      footprints: [],
      ceilings: ceilings.map((kv_hit, i) => ({ regime: "roomy", trace: "multi-turn", sessions: 8, seed: i + 1, kv_hit })),
      error_samples: [],
      runs: ceilings.map((kv_hit, i) => routingRun("prefix-aware", 8, i + 1, 50, 100, { kv_hit })),
    };
    const md = renderReport(results);
    // The mean, 0.927, would sit under the cell's median kv_hit of 0.930.
    expect(md).toContain("| 8 | 0.930 | 0.930 · 50 / 100 |");
    expect(md).toContain("(median over seeds)");
  });
});
