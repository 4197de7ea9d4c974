import { describe, expect, it } from "vitest";
import { renderMetrics, newCounters } from "../../bench/fleet/metrics.ts";
import { outputText } from "../../bench/fleet/output-text.ts";
import { textBlocks } from "../../bench/fleet/prompt-blocks.ts";
import { renderChat } from "../../bench/fleet/prompt-render.ts";
import { replay, TTFT_RULE } from "../../bench/replay/index.ts";
import { generateTrace } from "../../bench/traces/index.ts";
import { aggregate } from "../../bench/routing/aggregate.ts";
import { renderChart } from "../../bench/routing/chart.ts";
import { parseRoutingArgs } from "../../bench/routing/cli-args.ts";
import { kvgateRouter, points } from "../../bench/routing/matrix.ts";
import { selectPeers, type RoutingPeer } from "../../bench/routing/peers.ts";
import { p95Splits } from "../../bench/routing/p95-split.ts";
import { renderReport } from "../../bench/routing/report.ts";
import type { RoutingResults, RoutingRun } from "../../bench/routing/types.ts";
import { baselinesIn, versusBest, worstOf } from "../../bench/routing/versus-best.ts";
import { warmUp, warmUpTrace, WARM_UP_REQUESTS } from "../../bench/routing/warm-up.ts";
import { requestsTotal, shareBetween, workerRequestCounts } from "../../bench/routing/worker-share.ts";
import { useFleets } from "../support/fleets.ts";
import { routingRun as run } from "../support/routing-runs.ts";

const fleetOf = useFleets();
const MODEL = "kvgate-sim";

describe("bench:routing flags", () => {
  it("keeps every flag, with --peers beside them", () => {
    const a = parseRoutingArgs(
      ["--quick", "--report-only", "--merge", "--seeds", "2", "--regime", "roomy", "--trace", "multi-turn,rag", "--strategy", "prefix-aware", "--shards", "2,4", "--sessions", "4,8", "--peers", "none", "--scheduling-policy", "fcfs,priority", "--out", "/tmp/x"],
      "/default",
    );
    expect(a).toEqual({
      out: "/tmp/x",
      quick: true,
      reportOnly: true,
      merge: true,
      seeds: 2,
      regimes: ["roomy"],
      traces: ["multi-turn", "rag"],
      strategies: ["prefix-aware"],
      shards: [2, 4],
      sessions: [4, 8],
      peers: "none",
      schedulingPolicies: ["fcfs", "priority"],
    });
  });

  it("defaults to 3 seeds, every regime, trace, strategy and peer, and the results folder", () => {
    expect(parseRoutingArgs([], "/default")).toEqual({
      out: "/default",
      quick: false,
      reportOnly: false,
      merge: false,
      seeds: 3,
      regimes: undefined,
      traces: undefined,
      strategies: undefined,
      shards: undefined,
      sessions: undefined,
      peers: undefined,
      schedulingPolicies: ["fcfs"],
    });
  });

  it("refuses an unknown flag and a seed count that is not a positive integer", () => {
    expect(() => parseRoutingArgs(["--peer", "none"], "/d")).toThrow(/^unknown argument --peer \(--quick --report-only --merge --seeds N/);
    expect(() => parseRoutingArgs(["--seeds", "0"], "/d")).toThrow('--seeds takes a positive integer, not "0"');
    expect(() => parseRoutingArgs(["--sessions", "4,x"], "/d")).toThrow('--sessions takes a positive integer, not "x"');
    expect(() => parseRoutingArgs(["--shards", "0"], "/d")).toThrow('--shards takes a positive integer, not "0"');
    expect(() => parseRoutingArgs(["--trace"], "/d")).toThrow("--trace needs a value");
    expect(() => parseRoutingArgs(["--scheduling-policy", "fcfs,lifo"], "/d")).toThrow(/--scheduling-policy: "lifo"/);
  });
});

describe("the plan with peers", () => {
  it("runs the peers after kvgate's strategies at every point; --strategy picks only kvgate's", () => {
    const plan = points({ quick: true, seeds: 1, traces: ["multi-turn"], regimes: ["roomy"], strategies: ["least-loaded", "prefix-aware"], peers: ["sglang-cache_aware", "sglang-round_robin"] });
    expect(plan.map((p) => p.strategy)).toEqual(["least-loaded", "prefix-aware", "sglang-cache_aware", "sglang-round_robin"]);
    expect(new Set(plan.map((p) => `${p.sessions}|${p.seed}|${p.turns}`)).size).toBe(1);
  });

  it("--shards runs prefix-aware over that many routing objects after kvgate's strategies, as kvgate's, not a baseline", () => {
    const plan = points({ quick: true, seeds: 1, traces: ["multi-turn"], regimes: ["roomy"], strategies: ["prefix-aware"], shards: [2, 4], peers: ["sglang-cache_aware"] });
    expect(plan.map((p) => p.strategy)).toEqual(["prefix-aware", "prefix-aware@2", "prefix-aware@4", "sglang-cache_aware"]);
    expect(kvgateRouter("prefix-aware@4")).toEqual({ strategy: "prefix-aware", shards: 4, schedulingPolicy: "fcfs" });
    expect(kvgateRouter("least-loaded")).toEqual({ strategy: "least-loaded", shards: 1, schedulingPolicy: "fcfs" });
    expect(kvgateRouter("prefix-aware@4+priority")).toEqual({ strategy: "prefix-aware", shards: 4, schedulingPolicy: "priority" });
    expect(kvgateRouter("sglang-cache_aware+priority")).toBeNull();
    expect(kvgateRouter("sglang-cache_aware")).toBeNull();
    expect(kvgateRouter("prefix-aware@0")).toBeNull();
    expect(baselinesIn(plan)).toEqual(["least-loaded", "round-robin", "sglang-cache_aware"]);
  });

  it("--scheduling-policy fcfs,priority runs kvgate's routers again in front of priority workers, the peers once", () => {
    const plan = points({ quick: true, seeds: 1, traces: ["multi-turn"], regimes: ["roomy"], strategies: ["prefix-aware"], shards: [2], peers: ["sglang-cache_aware"], schedulingPolicies: ["fcfs", "priority"] });
    expect(plan.map((p) => p.strategy)).toEqual(["prefix-aware", "prefix-aware@2", "prefix-aware+priority", "prefix-aware@2+priority", "sglang-cache_aware"]);
  });

  it("--sessions picks points of each regime's sweep, with --quick too", () => {
    const sessionsOf = (quick: boolean, sessions?: number[]) =>
      points({ quick, seeds: 1, traces: ["multi-turn"], strategies: ["prefix-aware"], ...(sessions ? { sessions } : {}) }).map((p) => `${p.regime.name} ${p.sessions}`);
    expect(sessionsOf(true)).toEqual(["roomy 8", "pressured 16"]);
    expect(sessionsOf(true, [4])).toEqual(["roomy 4"]);
    expect(sessionsOf(false, [8, 16])).toEqual(["roomy 8", "roomy 16", "pressured 8", "pressured 16"]);
  });
});

function peer(name: string, installed: boolean): RoutingPeer {
  return {
    name,
    package: "pkg",
    version: "1.0.0",
    settings: "defaults",
    install: "pkg",
    installed: () => installed,
    start: () => Promise.reject(new Error("not started in this test")),
  };
}

describe("--peers", () => {
  const known = [peer("a-one", true), peer("a-two", false), peer("b", true)];

  it("takes every installed peer when absent, and says which are not installed", () => {
    const { peers, notes } = selectPeers(undefined, known);
    expect(peers.map((p) => p.name)).toEqual(["a-one", "b"]);
    expect(notes).toEqual(["a-two: pkg 1.0.0 is not installed, skipped (install: node bench/peers/install.ts pkg)"]);
  });

  it("takes none for none, and the named ones in the registry's order", () => {
    expect(selectPeers("none", known)).toEqual({ peers: [], notes: [] });
    expect(selectPeers("b,a-one", known).peers.map((p) => p.name)).toEqual(["a-one", "b"]);
  });

  it("refuses a name it does not know", () => {
    expect(() => selectPeers("a-one,c", known)).toThrow("--peers: unknown peer c (known: a-one, a-two, b, or none)");
  });

  it("knows SGLang's router with both policies", () => {
    expect(() => selectPeers("sglang-cache_aware,sglang-round_robin")).not.toThrow();
  });
});

describe("backend share of a peer, from the workers' counters", () => {
  it("reads kvgate_sim_requests_total from a worker's /metrics text", () => {
    const counters = { ...newCounters(), requests: 17 };
    const gauges = { running: 0, waiting: 0, kvBlocksUsed: 0, kvBlocksCached: 0, kvBlocksCapacity: 1 };
    expect(requestsTotal(renderMetrics(2, MODEL, counters, gauges))).toBe(17);
    expect(() => requestsTotal("# nothing here\n")).toThrow(/kvgate_sim_requests_total/);
  });

  it("counts only the requests between the two readings, named as kvgate names the backends", () => {
    expect(shareBetween([8, 2, 0, 5], [14, 4, 0, 9])).toEqual({ "gpu-0": 0.5, "gpu-1": 2 / 12, "gpu-2": 0, "gpu-3": 4 / 12 });
    expect(shareBetween([1, 1], [1, 1])).toEqual({ "gpu-0": 0, "gpu-1": 0 });
  });

  it("sees the requests a real fleet received, per worker", async () => {
    const fleet = await fleetOf({ workers: 2 });
    const before = await workerRequestCounts(fleet.urls);
    await replay(generateTrace("single-turn", { sessions: 3, turns: 1 }), { baseUrl: fleet.urls[1] as string, model: MODEL });
    const after = await workerRequestCounts(fleet.urls);
    expect(shareBetween(before, after)).toEqual({ "gpu-0": 0, "gpu-1": 1 });
  });
});

describe("the warm-up", () => {
  it("sends prompts that, with their one-token answer, are shorter than one KV block", () => {
    const trace = warmUpTrace();
    expect(trace.sessions).toHaveLength(WARM_UP_REQUESTS);
    const prompts = trace.sessions.map((s) => {
      const turn = s.turns[0];
      if (!turn || s.turns.length !== 1) throw new Error("one turn per warm-up session");
      const rendered = renderChat({ messages: turn.add });
      if (!("text" in rendered)) throw new Error("does not render");
      expect(textBlocks(rendered.text + outputText(turn.maxTokens)).chain).toHaveLength(0);
      return rendered.text;
    });
    expect(new Set(prompts).size).toBe(WARM_UP_REQUESTS);
  });

  it("leaves nothing in a worker's KV cache and fails loudly when the router does", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const url = fleet.urls[0] as string;
    await warmUp({ baseUrl: url, model: MODEL });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(requestsTotal(metrics)).toBe(WARM_UP_REQUESTS);
    expect(metrics).toMatch(/^kvgate_sim_kv_blocks_cached\{[^}]*\} 0$/m);
    await expect(warmUp({ baseUrl: url, model: "no-such-model" })).rejects.toThrow(/warm-up request failed \(status 404\)/);
  });
});

function results(runs: RoutingRun[]): RoutingResults {
  return {
    command: "npm run bench:routing",
    date: "2026-11-23T00:00:00.000Z",
    quick: false,
    regimes: [],
    footprints: [],
    ceilings: [],
    error_samples: [],
    peers: [{ name: "sglang-cache_aware", package: "sglang-router", version: "0.3.2", settings: "policy cache_aware at its defaults" }],
    warm_up_requests: 8,
    runs,
  };
}

describe("prefix-aware against the best of least-loaded, round-robin and every peer", () => {
  it("compares each point with its lowest baseline, and allows 5% only where that baseline's seeds spread more", () => {
    const r = results([
      // 8 sessions: the peer is the best p50 (100) and steady; prefix-aware's 104 is over it.
      ...[1, 2].map((seed) => run("prefix-aware", 8, seed, 104, 200)),
      ...[1, 2].map((seed) => run("least-loaded", 8, seed, 120, 210)),
      ...[1, 2].map((seed) => run("round-robin", 8, seed, 130, 190 + seed * 20)),
      ...[1, 2].map((seed) => run("sglang-cache_aware", 8, seed, 100, 400)),
    ]);
    const compared = versusBest(aggregate(r), "roomy", "multi-turn", [8], ["least-loaded", "round-robin", "sglang-cache_aware"]);
    expect(compared).toEqual([
      { sessions: 8, metric: "p50", baseline: "sglang-cache_aware", best: 100, ratio: 1.04, spread: 1, limit: 1, atLeast: false, baselineAtLeast: false },
      { sessions: 8, metric: "p95", baseline: "least-loaded", best: 210, ratio: 200 / 210, spread: 1, limit: 1, atLeast: false, baselineAtLeast: false },
    ]);
    expect(worstOf(compared, "p50")?.baseline).toBe("sglang-cache_aware");
  });

  it("does not show prefix-aware within its limit on a p95 that is only a lower bound (timeouts reach it)", () => {
    const timedOut = { p50: 100, p95: 190, p99: 300_000, censored: 2, at_least: ["p95" as const, "p99" as const] };
    const r = { ...results([run("prefix-aware", 8, 1, 100, 190, { errors: 2, ttft_ms: timedOut }), run("least-loaded", 8, 1, 120, 210)]), ttft_rule: TTFT_RULE };
    const cells = aggregate(r);
    expect(cells.get("roomy|multi-turn|8|prefix-aware")).toMatchObject({ p95: 190, p99: 300_000, at_least: ["p95", "p99"] });
    const [, p95] = versusBest(cells, "roomy", "multi-turn", [8], ["least-loaded", "round-robin"]);
    expect(p95).toMatchObject({ ratio: 190 / 210, atLeast: true });
    const md = renderReport(r);
    expect(md).toContain("| 8 | – | 0.900 · 120 / 210 | 0.900 · 100 / ≥ 190 (2 errors) |");
    expect(md).toContain("each point, p50 · p95 over the best (bold: over its limit): 8 0.83 · **≥ 0.90** |");
    expect(md).toContain(TTFT_RULE);
    // Results made before the rule say so instead.
    expect(renderReport({ ...r, ttft_rule: undefined })).toContain("these results predate counting a request that timed out");
  });

  it("marks a ratio ? where both its sides are lower bounds, ≤ where the baseline's alone is", () => {
    const timedOut = { p50: 100, p95: 190, p99: 300_000, censored: 2, at_least: ["p95" as const, "p99" as const] };
    const bothBound = { ...results([run("prefix-aware", 8, 1, 100, 190, { errors: 2, ttft_ms: timedOut }), run("least-loaded", 8, 1, 120, 210, { errors: 2, ttft_ms: { ...timedOut, p50: 120, p95: 210 } })]), ttft_rule: TTFT_RULE };
    const [, both] = versusBest(aggregate(bothBound), "roomy", "multi-turn", [8], ["least-loaded", "round-robin"]);
    expect(both).toMatchObject({ atLeast: true, baselineAtLeast: true });
    expect(renderReport(bothBound)).toContain("each point, p50 · p95 over the best (bold: over its limit): 8 0.83 · **? 0.90** |");
    const baselineBound = { ...results([run("prefix-aware", 8, 1, 100, 190), run("least-loaded", 8, 1, 120, 210, { errors: 2, ttft_ms: { ...timedOut, p50: 120, p95: 210 } })]), ttft_rule: TTFT_RULE };
    expect(renderReport(baselineBound)).toContain("each point, p50 · p95 over the best (bold: over its limit): 8 0.83 · ≤ 0.90 |");
  });

  it("gives the allowance where the best baseline's own seeds moved more than 5%", () => {
    const r = results([
      ...[1, 2].map((seed) => run("prefix-aware", 4, seed, 104, 200)),
      ...[1, 2].map((seed) => run("least-loaded", 4, seed, 95 + seed * 10, 300)),
    ]);
    // Two seeds: the median is the lower middle (bench/stats/quantiles.ts).
    const [p50] = versusBest(aggregate(r), "roomy", "multi-turn", [4], ["least-loaded", "round-robin"]);
    expect(p50).toMatchObject({ baseline: "least-loaded", best: 105, limit: 1.05 });
    expect(p50?.spread).toBeCloseTo(115 / 105);
  });

  it("shows peers as columns after kvgate's strategies, names them in the goal, and says how the run was warmed", () => {
    const r = results([
      run("prefix-aware", 8, 1, 104, 200),
      run("least-loaded", 8, 1, 120, 210),
      run("round-robin", 8, 1, 130, 220),
      run("sglang-cache_aware", 8, 1, 100, 400, { kv_hit: 0.95 }),
    ]);
    const md = renderReport(r);
    expect(md).toContain("| sessions | kv_hit ceiling | round-robin kv_hit · TTFT p50 / p95 ms | least-loaded kv_hit · TTFT p50 / p95 ms | prefix-aware kv_hit · TTFT p50 / p95 ms | sglang-cache_aware kv_hit · TTFT p50 / p95 ms |");
    expect(md).toContain("| 8 | – | 0.900 · 130 / 220 | 0.900 · 120 / 210 | 0.900 · 104 / 200 | 0.950 · 100 / 400 |");
    expect(md).toContain(
      "| (a) roomy multi-turn: prefix-aware TTFT p50 and p95 ≤ the best of least-loaded, round-robin, sglang-cache_aware at every concurrency | **no** | over at 8 sessions; worst p50 1.040 × sglang-cache_aware at 8 sessions (its seeds ×1.00, no allowance), p95 0.952 × least-loaded at 8 sessions (its seeds ×1.00, no allowance); each point, p50 · p95 over the best (bold: over its limit): 8 **1.04** · 0.95 |",
    );
    expect(md).toContain("`sglang-cache_aware` (sglang-router 0.3.2, policy cache_aware at its defaults)");
    expect(md).toContain("Warm-up: before each run, 8 streamed requests");
    expect(renderChart(r)).toContain(">sglang-cache_aware</text>");
  });

  it("splits a p95 over the best into the gateway's share and the routing's, and shows the turns after the first", () => {
    const later = (p95: number) => ({ ttft_later_turns_ms: { p50: 50, p95, p99: p95 } });
    const r = results([
      // 8 sessions: prefix-aware's p95 230 is 1.15 × SGLang's round_robin's 200, where kvgate's own
      // round-robin, placing the same way, has 220; after the first turns it is the lowest.
      run("prefix-aware", 8, 1, 100, 230, later(100)),
      run("least-loaded", 8, 1, 100, 240, later(150)),
      run("round-robin", 8, 1, 100, 220, later(140)),
      run("sglang-round_robin", 8, 1, 100, 200, later(120)),
      // 4 sessions: under the best, so counted in the ranges but given no row.
      run("prefix-aware", 4, 1, 100, 180, later(90)),
      run("least-loaded", 4, 1, 100, 190, later(90)),
      run("round-robin", 4, 1, 100, 200, later(90)),
      run("sglang-round_robin", 4, 1, 100, 200, later(90)),
    ]);
    const cells = aggregate(r);
    const splits = p95Splits(cells, "roomy", "multi-turn", [4, 8], ["least-loaded", "round-robin", "sglang-round_robin"]);
    expect(splits[1]).toEqual({ sessions: 8, gateway: 1.1, routing: 230 / 220, laterTurns: { ratio: 100 / 120, baseline: "sglang-round_robin" } });
    expect(splits[0]).toMatchObject({ sessions: 4, gateway: 1, routing: 0.9, laterTurns: { ratio: 1, baseline: "least-loaded" } });
    const md = renderReport(r);
    expect(md).toContain("Over all 2 closed-loop points, TTFT p95 medians: kvgate round-robin over sglang-round_robin 1.00–1.10 (median 1.00); prefix-aware over kvgate round-robin 0.90–1.05 (median 0.90); prefix-aware over the best baseline after each session's first turn 0.83–1.00 (median 0.83).");
    expect(md).toContain("| roomy multi-turn 8 | 1.15 × sglang-round_robin | 1.10 | 1.05 | 0.83 × sglang-round_robin |");
    expect(md).not.toContain("| roomy multi-turn 4 |");
  });

  it("has no p95 split without a baseline to compare prefix-aware with, and says so when no p95 is over", () => {
    expect(renderReport(results([run("prefix-aware", 8, 1, 100, 200)]))).not.toContain("### Where prefix-aware's p95");
    const md = renderReport(results([run("prefix-aware", 8, 1, 100, 200), run("round-robin", 8, 1, 100, 210)]));
    expect(md).toContain("kvgate round-robin over sglang-round_robin –; prefix-aware over kvgate round-robin 0.95–0.95 (median 0.95)");
    expect(md).toContain("Prefix-aware's p95 is over its limit at no closed-loop point.");
  });

  it("leaves the peer and warm-up notes out of results that predate them", () => {
    const { peers: _p, warm_up_requests: _w, ...old } = results([run("prefix-aware", 8, 1, 104, 200), run("least-loaded", 8, 1, 100, 210)]);
    const md = renderReport(old);
    expect(md).not.toContain("Peers,");
    expect(md).not.toContain("Warm-up");
    expect(md).toContain("≤ the best of least-loaded at every concurrency | **no** |");
  });
});
