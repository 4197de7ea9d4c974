import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { groupShards } from "../../src/sharding/partition.ts";
import { profileOf, resolveFleetOptions } from "../../bench/fleet/options.ts";
import { replay, replayOpenLoop, TTFT_RULE } from "../../bench/replay/index.ts";
import { generateTrace, mooncakeTrace, TRACE_KINDS, type TimedRequest, type TimedTrace } from "../../bench/traces/index.ts";
import { ceilingOf } from "../../bench/routing/ceiling.ts";
import { closedLoopCeiling, sessionsAsTimed } from "../../bench/virtual/closed-loop.ts";
import { headOf, OPEN_LOOP_SETUPS, scheduleOf } from "../../bench/routing/open-loop-matrix.ts";
import { replayVirtual, type VirtualReplayOptions } from "../../bench/virtual/replay.ts";
import { pooled, ratioWithInterval } from "../../bench/virtual/stats.ts";
import { renderVirtualReport, verdict } from "../../bench/virtual/report.ts";
import { fleetFit, openLoopFleetFit } from "../../bench/virtual/fleet-fit.ts";
import type { VirtualRun } from "../../bench/virtual/point.ts";
import { outputText } from "../../bench/fleet/output-text.ts";
import { useFleets } from "../support/fleets.ts";

const fleetOf = useFleets();
const MODEL = "kvgate-sim";
const FLEET = { preset: "a100-7b", timeScale: 0.01, maxModelLen: 262_144 } as const;

function group(workers: number, extra: Record<string, unknown> = {}): ResolvedGroup {
  const deployments = Array.from({ length: workers }, (_, i) => ({ id: `gpu-${i}`, baseUrl: `http://10.0.0.${i + 1}:8000`, model: MODEL }));
  const r = parseConfig({ modelGroups: [{ name: MODEL, strategy: "prefix-aware", deployments, ...extra }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

function options(trace: TimedTrace, arrivalsMs: number[], over: Partial<VirtualReplayOptions> = {}): VirtualReplayOptions {
  return {
    trace,
    arrivalsMs,
    group: group(4),
    profile: profileOf(resolveFleetOptions({ ...FLEET, preset: "a100-7b", timeScale: 1 })),
    model: MODEL,
    timeoutMs: 60_000,
    seed: 1,
    hopMs: 20,
    maxInFlight: 1024,
    ...over,
  };
}

/** Mooncake's first conversations: long prompts, follow-ups that share their earlier turn's prefix. */
function mooncakeHead(n: number): TimedTrace {
  const whole = mooncakeTrace({ file: "conversation", fromMinutes: 0, minutes: 2 });
  return headOf(whole, whole.requests.map((r) => r.atMs), whole.requests[n - 1]?.atMs ?? 0).trace;
}

/** A conversation of `turns` turns, each sending the history with the simulator's own answers in it. */
function conversation(turns: number): TimedRequest[] {
  const ask = (t: number) => ({ role: "user" as const, content: `question ${t}: ${"about the simulated cache ".repeat(200)}` });
  return Array.from({ length: turns }, (_, t) => ({
    id: `conversation-${t}`,
    atMs: 0,
    after: null,
    maxTokens: 64,
    promptTokens: 0,
    blocks: [],
    messages: () => Array.from({ length: t + 1 }, (_, k) => (k < t ? [ask(k), { role: "assistant" as const, content: outputText(64) }] : [ask(k)])).flat(),
  }));
}

/** [earlier, later] for each request whose first `blocks` trace blocks repeat an earlier request's (the latest such). */
function repeatsOf(requests: readonly TimedRequest[], blocks: number): [number, number][] {
  const last = new Map<string, number>();
  const out: [number, number][] = [];
  requests.forEach((r, i) => {
    if (r.blocks.length < blocks) return;
    const key = r.blocks.slice(0, blocks).join(",");
    const earlier = last.get(key);
    if (earlier !== undefined) out.push([earlier, i]);
    last.set(key, i);
  });
  return out;
}

describe("a replay in virtual time", () => {
  it("finds in the cache exactly what the simulated worker's HTTP server finds, request by request", async () => {
    // One request at a time (each follows the one before), so both engines see the same order:
    // their caches must then agree token for token.
    const head = mooncakeHead(24);
    const requests = [...head.requests, ...conversation(3)].map((r, i) => ({ ...r, after: i === 0 ? null : i - 1 }));
    const trace = { ...head, requests };
    const arrivalsMs = trace.requests.map(() => 0);
    const fleet = await fleetOf({ workers: 1, ...FLEET, servedModelName: MODEL });
    const http = await replayOpenLoop(trace, { baseUrl: fleet.urls[0] ?? "", model: MODEL, arrivalsMs });
    const virtual = replayVirtual({
      ...options(trace, arrivalsMs),
      group: group(1),
      profile: profileOf(resolveFleetOptions({ ...FLEET, workers: 1 })),
    });
    const usage = (rs: typeof http.requests) => rs.map((r) => [r.error, r.promptTokens, r.cachedTokens]);
    expect(usage(virtual.requests)).toEqual(usage(http.requests));
    // The trace reuses prefixes, and the conversation's later turns hit through the answers before them.
    expect(virtual.requests.filter((r) => (r.cachedTokens ?? 0) > 0).length).toBeGreaterThan(2);
    const [, second, third] = virtual.requests.slice(-3);
    expect(second?.cachedTokens).toBeGreaterThan(1000);
    expect(third?.cachedTokens).toBeGreaterThan((second?.cachedTokens ?? 0) + 64);
  }, 30_000);

  it("gives the same figures every time for the same inputs, and other paths for other seeds", () => {
    const trace = mooncakeHead(120);
    const arrivalsMs = trace.requests.map((r) => r.atMs / 4);
    const strip = (r: ReturnType<typeof replayVirtual>) => r.requests.map((x) => [x.backend, x.ttftMs, x.cachedTokens]);
    const a = replayVirtual(options(trace, arrivalsMs));
    expect(strip(replayVirtual(options(trace, arrivalsMs)))).toEqual(strip(a));
    expect(strip(replayVirtual(options(trace, arrivalsMs, { seed: 2 })))).not.toEqual(strip(a));
    expect(a.requests.every((r) => r.error === null)).toBe(true);
  }, 30_000);

  it("places over every shard, sends a prompt where its prefix went, and gives back every lease", () => {
    const { trace, arrivalsMs } = scheduleOf({ setup: OPEN_LOOP_SETUPS.mooncake, seed: 1, quick: false });
    let leases = -1;
    const sharded = group(4, { shards: 2 });
    // At a quarter of the benchmark's load: a shard backed up by more than a prefill elsewhere passes a prompt on (ShardChoice).
    const r = replayVirtual(options(trace, arrivalsMs.map((t) => t * 4), { group: sharded, onEnd: (g) => (leases = g.leases) }));
    expect(leases).toBe(0);
    expect(new Set(r.requests.map((x) => x.backend)).size).toBe(4);
    // A prompt that repeats an earlier one's first 8 blocks (4k tokens) is a conversation going on:
    // its key sends it to that one's shard, whichever of the shard's backends then serves it —
    // unless ShardChoice sends it on, its shard's queue longer than its prefill on the other or
    // its load past the bound: 1 to 3 of these 24, as the shards' queues fall out. A key that
    // ignored the prefix would keep half of them on their shard.
    const shardOf = new Map(groupShards(sharded).views.flatMap((v, s) => v.deployments.map((d) => [d.id, s] as const)));
    const repeats = repeatsOf(trace.requests, 8);
    expect(repeats.length).toBeGreaterThan(10);
    const stayed = repeats.filter(([earlier, i]) => shardOf.get(r.requests[earlier]?.backend ?? "") === shardOf.get(r.requests[i]?.backend ?? "")).length;
    expect(stayed / repeats.length).toBeGreaterThan(0.8);
  }, 30_000);

  it("renews every lease it holds: none expires though answers outlast the lease's time to live", () => {
    const trace = mooncakeHead(60);
    const arrivalsMs = trace.requests.map((r) => r.atMs / 4);
    let end = { leases: -1, expired: -1 };
    // Leases of 2 s, renewed every 667 ms; Mooncake's answers take seconds.
    const r = replayVirtual(options(trace, arrivalsMs, { group: group(4, { leaseTtlMs: 2_000 }), onEnd: (e) => (end = { leases: e.leases, expired: e.expired }) }));
    expect(Math.max(...r.requests.map((x) => x.totalMs))).toBeGreaterThan(4_000);
    expect(end).toEqual({ leases: 0, expired: 0 });
  }, 30_000);

  it("times a request out as the client does: an error after the timeout, its first token's time kept, and its lease given back", () => {
    const trace = mooncakeHead(40);
    const arrivalsMs = trace.requests.map(() => 0);
    let leases = -1;
    const r = replayVirtual(options(trace, arrivalsMs, { timeoutMs: 2_000, onEnd: (g) => (leases = g.leases) }));
    const late = r.requests.filter((x) => x.error !== null);
    expect(late.length).toBeGreaterThan(0);
    expect(late.every((x) => x.error?.includes("2000 ms") && x.totalMs === 2_000 && x.timedOutMs === 2_000)).toBe(true);
    // Some had their first token before the timeout: it is their TTFT, as the HTTP replay records it.
    const started = late.filter((x) => x.ttftMs !== null);
    expect(started.length).toBeGreaterThan(0);
    expect(started.every((x) => (x.ttftMs as number) < 2_000)).toBe(true);
    expect(leases).toBe(0);
  }, 30_000);

  it("reads a body in a time that grows with it: of two requests sent at once, the smaller reaches the engine first", () => {
    const ask = (id: string, chars: number): TimedRequest => ({
      id, atMs: 0, after: null, maxTokens: 8, promptTokens: 0, blocks: [],
      messages: () => [{ role: "user" as const, content: `${id}: ${"words of a prompt ".repeat(chars / 18)}` }],
    });
    // The large one is sent first; one worker, no random hop.
    const trace: TimedTrace = { kind: "mooncake", params: {}, blockTokens: 16, requests: [ask("large", 400_000), ask("small", 2_000)] };
    const run = (msPerMb: number) => {
      const r = replayVirtual(options(trace, [0, 0], { group: group(1), hopMs: 0, msPerMb }));
      return Object.fromEntries(r.requests.map((x) => [x.session, x.ttftMs ?? NaN]));
    };
    const unread = run(0);
    // Without a read time the engine takes them in the order sent: the small one waits out the large one's prefill.
    expect(unread.small).toBeGreaterThan(unread.large as number);
    const read = run(50);
    // 50 ms per MB: the large one's ~0.4 MB takes ~20 ms to read, the small one's ~0.1 ms; the small one is prefilled first.
    expect(read.small).toBeLessThan(read.large as number);
    expect(read.large).toBeGreaterThan((unread.large as number) + 15);
  }, 30_000);

  it("draws a hop before routing too: a burst is routed in the order it reaches the gateway, not the order it was sent", () => {
    const ask = (id: string): TimedRequest => ({
      id, atMs: 0, after: null, maxTokens: 8, promptTokens: 0, blocks: [],
      messages: () => [{ role: "user" as const, content: `${id}: ${"words of a prompt ".repeat(100)}` }],
    });
    // Eight prompts of one size, sent at once in this order, round-robin over two workers: the
    // router takes them in turn as they reach it.
    const trace: TimedTrace = { kind: "mooncake", params: {}, blockTokens: 16, requests: ["a", "b", "c", "d", "e", "f", "g", "h"].map(ask) };
    const run = (seed: number, over: Partial<VirtualReplayOptions>) =>
      replayVirtual(options(trace, trace.requests.map(() => 0), { group: group(2, { strategy: "round-robin" }), msPerMb: 0, seed, ...over })).requests;
    const alternates = (rs: readonly { backend: string | null }[]) => rs.every((r, i) => i === 0 || r.backend !== rs[i - 1]?.backend);
    const seeds = [1, 2, 3, 4, 5, 6];
    // A hop after routing only: every burst is routed in the order sent, whatever the draws.
    expect(seeds.every((seed) => alternates(run(seed, { hopMs: 20 })))).toBe(true);
    // A hop before it: the order they reach the router is the draws'.
    const before = seeds.map((seed) => run(seed, { hopMs: 0, preRouteHopMs: 20 }));
    expect(before.some((rs) => !alternates(rs))).toBe(true);
  }, 60_000);

  it("leaves every other draw as it was without a hop before routing", () => {
    const trace = mooncakeHead(30);
    const arrivalsMs = trace.requests.map(() => 0);
    const run = (over: Partial<VirtualReplayOptions>) => replayVirtual(options(trace, arrivalsMs, { msPerMb: 50, ...over })).requests.map((r) => [r.backend, r.ttftMs]);
    expect(run({ preRouteHopMs: 0 })).toEqual(run({}));
    expect(run({ preRouteHopMs: 10 })).not.toEqual(run({}));
  }, 60_000);
});

describe("a closed-loop trace in virtual time", () => {
  it("sends what bench:routing's replay sends, with the worker's own answers in the history: cached tokens request by request as over HTTP", async () => {
    const single = profileOf(resolveFleetOptions({ ...FLEET, workers: 1 }));
    for (const kind of TRACE_KINDS) {
      // A fresh worker, and one session: its turns in order, so both engines see one order.
      const fleet = await fleetOf({ workers: 1, ...FLEET, servedModelName: MODEL });
      const trace = generateTrace(kind, { sessions: 1, turns: 4, seed: 3 });
      const http = await replay(trace, { baseUrl: fleet.urls[0] ?? "", model: MODEL });
      const timed = sessionsAsTimed(trace);
      const virtual = replayVirtual({ ...options(timed, timed.requests.map(() => 0)), group: group(1), profile: single });
      const usage = (rs: readonly { error: string | null; promptTokens: number | null; cachedTokens: number | null }[]) => rs.map((r) => [r.error, r.promptTokens, r.cachedTokens]);
      expect(usage(virtual.requests), kind).toEqual(usage(http.requests));
    }
    // A conversation's later turns hit through the answers appended before them.
    const talk = sessionsAsTimed(generateTrace("multi-turn", { sessions: 1, turns: 3, seed: 3 }));
    const turns = replayVirtual({ ...options(talk, talk.requests.map(() => 0)), group: group(1), profile: single }).requests;
    expect(turns[2]?.cachedTokens).toBeGreaterThan((turns[1]?.promptTokens ?? Infinity) - 16);
  }, 60_000);

  it("runs every session at once and each turn once the one before it has ended", () => {
    const timed = sessionsAsTimed(generateTrace("multi-turn", { sessions: 6, turns: 3, seed: 1 }));
    const r = replayVirtual(options(timed, timed.requests.map(() => 0), { hopMs: 0 }));
    expect(r.requests).toHaveLength(18);
    for (const q of r.requests) {
      const before = timed.requests[q.index]?.after ?? null;
      if (before === null) expect(q.sentMs).toBe(0);
      else {
        const prior = r.requests[before];
        expect(q.sentMs).toBe((prior?.sentMs ?? NaN) + (prior?.totalMs ?? NaN));
      }
    }
  });

  it("has bench:routing's ceiling: one worker with an unbounded cache that sees every request", async () => {
    for (const kind of ["multi-turn", "hot-prefix"] as const) {
      const trace = generateTrace(kind, { sessions: 4, turns: 3, seed: 2 });
      // Request by request; over every request, the kv_hit bench:routing's ceiling replay reports.
      const { cached, prompt } = closedLoopCeiling(sessionsAsTimed(trace), MODEL);
      const sum = (xs: readonly number[]) => xs.reduce((x, y) => x + y, 0);
      const virtual = sum(cached) / sum(prompt);
      expect(virtual).toBeGreaterThan(0.3);
      expect(virtual).toBeCloseTo((await ceilingOf(trace)) ?? NaN, 6);
    }
  }, 30_000);
});

describe("the closed-loop report", () => {
  /** One closed-loop point's runs: 3 seeds × 8 draws, p50 and p95 `at(draw)`. */
  const point = (sessions: number, strategy: string, at: (draw: number) => number): VirtualRun[] =>
    [1, 2, 3].flatMap((seed) =>
      Array.from({ length: 8 }, (_, d) => ({
        trace: "multi-turn" as const, regime: "roomy", sessions, seed, strategy, shards: 1, jitter_seed: d + 1, hop_ms: 2, requests: 10, errors: 0,
        kv_hit: 0.9, kv_ceiling: 0.95, ttft_ms: { p50: at(d), p95: 2 * at(d), p99: 3 * at(d) }, goodput_share: 1, backend_share: {}, virtual_ms: 1,
      })),
    );
  const wobble = (d: number) => (d % 2 === 0 ? 1 : -1);

  it("sets prefix-aware against the best baseline at each point, and lists where it is shown above it", () => {
    const runs = [
      // 8 sessions: prefix-aware 10% over least-loaded, round-robin far behind.
      ...point(8, "prefix-aware", (d) => 110 + wobble(d)),
      ...point(8, "least-loaded", (d) => 100 + wobble(d)),
      ...point(8, "round-robin", (d) => 150 + wobble(d)),
      // 16 sessions: prefix-aware 10% under round-robin, the better baseline there.
      ...point(16, "prefix-aware", (d) => 90 + wobble(d)),
      ...point(16, "least-loaded", (d) => 120 + wobble(d)),
      ...point(16, "round-robin", (d) => 100 + wobble(d)),
    ];
    const md = renderVirtualReport({ command: "c", date: "d", commit: "x", hop_ms: 20, jitter_seeds: 8, runs });
    expect(md).toContain("### roomy · multi-turn");
    expect(md).toMatch(/at or below it 2; above it \(the interval wholly above 1\) 2 — roomy · multi-turn 8 p50 1\.100 × least-loaded's; roomy · multi-turn 8 p95 1\.100 × least-loaded's; not shown either way 0/);
    expect(md).toMatch(/\| 16 \| 0\.950 \| 0\.900 · 90 \/ 180 \| 0\.900 · 120 \/ 240 \| 0\.900 · 100 \/ 200 \| 0\.900 \(0\.\d+–0\.\d+\) \(round-robin\) \|/);
  });
});

describe("a ratio between two routers' virtual runs", () => {
  /** Seeds 1-3, `draws(seed)` jitter seeds each. */
  const runs = (strategy: string, kv: (seed: number, draw: number) => number, draws: (seed: number) => number = () => 12): VirtualRun[] =>
    [1, 2, 3].flatMap((seed) =>
      Array.from({ length: draws(seed) }, (_, d) => ({
        trace: "mooncake" as const, seed, strategy, shards: 1, jitter_seed: d + 1, hop_ms: 20, requests: 10, errors: 0,
        kv_hit: kv(seed, d), kv_ceiling: 0.1, ttft_ms: { p50: 1, p95: 2, p99: 3 }, goodput_share: 1, backend_share: {}, virtual_ms: 1,
      })),
    );
  const kv = (r: VirtualRun) => r.kv_hit;

  it("weighs each seed the same however many draws it has, and its interval holds the ratio", () => {
    // Seed 1 has 4 draws at 0.2, seeds 2 and 3 have 12 at 0.05; the other router is at 0.1 throughout.
    // Per seed that is 0.1 against 0.1; pooled over the draws it would be 0.071 against 0.1.
    const wobble = (d: number) => (d % 2 === 0 ? 0.001 : -0.001);
    const draws = (seed: number) => (seed === 1 ? 4 : 12);
    const a = runs("a", (seed, d) => (seed === 1 ? 0.2 : 0.05) + wobble(d), draws);
    const b = runs("b", (_, d) => 0.1 - wobble(d), draws);
    const r = ratioWithInterval(a, b, kv);
    expect(r.ratio).toBeCloseTo(1, 9);
    expect(pooled(a, kv)).toBeCloseTo(0.1, 9);
    expect(r.low).toBeLessThan(1);
    expect(r.high).toBeGreaterThan(1);
    expect(verdict(r, 0.02)).toBe("within");
  });

  it("pairs the two routers' runs of the same draw", () => {
    // Each draw moves both routers alike: paired, the ratio hardly moves; resampled apart it would.
    const shared = (d: number) => [0.02, 0.08, 0.05, 0.11, 0.03, 0.09][d % 6] as number;
    const r = ratioWithInterval(runs("a", (_, d) => shared(d) * 1.01), runs("b", (_, d) => shared(d)), kv);
    expect(r.ratio).toBeCloseTo(1.01, 9);
    expect(r.high - r.low).toBeLessThan(0.001);
  });

  it("says outside when the whole interval is past the tolerance, and not shown when it straddles it", () => {
    const b = runs("b", (_, d) => 0.05 + (d % 4) * 0.002);
    expect(verdict(ratioWithInterval(runs("a", (_, d) => 0.045 + (d % 4) * 0.002), b, kv), 0.02)).toBe("outside");
    const wide = ratioWithInterval(runs("a", (_, d) => 0.044 + (d % 2) * 0.02), b, kv);
    expect(wide.low).toBeLessThan(1.02);
    expect(wide.high).toBeGreaterThan(1.02);
    expect(verdict(wide, 0.02)).toBe("not shown");
  });

  it("over the seeds, resamples the seeds themselves: slices that disagree widen it where the draws agree", () => {
    // 12 slices, 6 draws each: every draw of a slice gives the same ratio, but the slices scatter ±6% around 1.
    const slices = Array.from({ length: 12 }, (_, k) => k + 1);
    const at = (strategy: string, kv: (seed: number, draw: number) => number): VirtualRun[] =>
      slices.flatMap((seed) =>
        Array.from({ length: 6 }, (_, d) => ({
          trace: "mooncake" as const, seed, strategy, shards: strategy.includes("@") ? 2 : 1, jitter_seed: d + 1, hop_ms: 20, requests: 10, errors: 0,
          kv_hit: kv(seed, d), kv_ceiling: 0.1, ttft_ms: { p50: 1, p95: 2, p99: 3 }, goodput_share: 1, backend_share: {}, virtual_ms: 1,
        })),
      );
    const base = (seed: number, d: number) => 0.05 + seed * 0.001 + d * 0.0001;
    const one = at("prefix-aware", base);
    const sharded = at("prefix-aware@2", (seed, d) => base(seed, d) * (seed % 2 === 0 ? 1.06 : 0.94));
    const draws = ratioWithInterval(sharded, one, kv);
    const seeds = ratioWithInterval(sharded, one, kv, "seeds");
    expect(seeds.ratio).toBeCloseTo(draws.ratio, 12);
    expect(draws.high - draws.low).toBeLessThan(0.001);
    expect(seeds.low).toBeLessThan(0.98);
    expect(seeds.high).toBeGreaterThan(1.02);
    // One seed is no sample of seeds: no interval.
    expect(ratioWithInterval(sharded.filter((r) => r.seed === 1), one, kv, "seeds").low).toBeNaN();
    // The report's verdict on shards reads the interval over the slices.
    const md = renderVirtualReport({ command: "c", date: "d", commit: "x", hop_ms: 20, jitter_seeds: 6, runs: [...one, ...sharded] });
    expect(md).toMatch(/\| prefix-aware@2 \| 1\.00\d \(1\.00\d–1\.00\d\) \| 1\.00\d \(0\.9[0-7]\d–1\.0[3-9]\d\) \| not shown \|/);
  });
});

describe("timeouts in a virtual report", () => {
  /** A router's runs of Mooncake seeds 1-2, 2 draws each; `timedOut` puts its p95 and p99 among timed-out requests. */
  const runs = (strategy: string, p95: number, timedOut: boolean, kvCeiling: number): VirtualRun[] =>
    [1, 2].flatMap((seed) =>
      [1, 2].map((d) => ({
        trace: "mooncake" as const, seed, strategy, shards: 1, jitter_seed: d, hop_ms: 20, requests: 100, errors: timedOut ? 6 : 0,
        kv_hit: 0.05, kv_ceiling: kvCeiling, kv_ceiling_trace: 0.1,
        ttft_ms: timedOut ? { p50: 1000, p95, p99: 60_000, censored: 6, at_least: ["p95" as const, "p99" as const] } : { p50: 1000, p95, p99: p95 },
        goodput_share: 1, backend_share: {}, virtual_ms: 1,
      })),
    );

  it("marks a mean with a lower bound in it ≥, and a ratio by the side its bounds are on; kv_hit against its own runs' ceiling", () => {
    const md = renderVirtualReport({ command: "c", date: "d", commit: "x", hop_ms: 20, jitter_seeds: 2, ttft_rule: TTFT_RULE, runs: [...runs("prefix-aware", 5000, false, 0.1), ...runs("round-robin", 60_000, true, 0.08)] });
    expect(md).toContain(TTFT_RULE);
    expect(md).toContain("kv_hit and its ceiling are over the same requests");
    // round-robin: kv_hit 0.05 of its answered requests' ceiling 0.08; its p95 and p99 are lower bounds, and so is its p95 over prefix-aware's.
    expect(md).toMatch(/\| round-robin \| 0\.0500 \| 0\.625 \| 1\.000 \(1\.000–1\.000\) \| 1000 \| ≥ 60000 \| ≥ 60000 \| ≥ 12\.000 \(12\.000–12\.000\) \| 12\.0 \|/);
    expect(md).toMatch(/\| prefix-aware \| 0\.0500 \| 0\.500 \| 1 \| 1000 \| 5000 \| 5000 \| 1 \| 0\.0 \|/);
    // Each seed's table: the whole trace's ceiling.
    expect(md).toMatch(/\| 1 \| 0\.1000 \| /);
  });
});

describe("the closed-loop points set against the fleet's", () => {
  /** `strategy`'s runs at `sessions`: 3 seeds × 4 draws here, p50 `p50(seed)` and p95 twice it. */
  const here = (sessions: number, strategy: string, p50: (seed: number) => number): VirtualRun[] =>
    [1, 2, 3].flatMap((seed) =>
      Array.from({ length: 4 }, (_, d) => ({
        trace: "multi-turn" as const, regime: "roomy", sessions, seed, strategy, shards: 1, jitter_seed: d + 1, hop_ms: 10, requests: 10, errors: 0,
        kv_hit: 0.9, kv_ceiling: 0.95, ttft_ms: { p50: p50(seed) + (d % 2 === 0 ? 1 : -1), p95: 2 * p50(seed), p99: 3 * p50(seed) }, goodput_share: 1, backend_share: {}, virtual_ms: 1,
      })),
    );
  /** The fleet's runs of the point, one per seed. */
  const there = (sessions: number, strategy: string, p50s: number[]) =>
    p50s.map((p50) => ({ regime: "roomy", trace: "multi-turn", strategy, sessions, ttft_ms: { p50, p95: 2 * p50, p99: 3 * p50 } }));

  it("gives each router's median ratio and mean miss over the points both ran, and names them in the report", () => {
    const runs = [...here(8, "least-loaded", () => 40), ...here(16, "least-loaded", () => 60), ...here(24, "least-loaded", () => 80), ...here(8, "prefix-aware", () => 50)];
    // The fleet: 8 sessions 50 (median of 30/50/90), 16 sessions 60, 24 sessions 100; prefix-aware and a point not run here at 12 besides.
    const fleet = [...there(8, "least-loaded", [90, 30, 50]), ...there(16, "least-loaded", [60, 60, 61]), ...there(24, "least-loaded", [100, 100, 100]), ...there(12, "least-loaded", [10, 10, 10]), ...there(8, "prefix-aware", [50, 50, 50])];
    const fits = fleetFit(runs, fleet);
    const ll = fits.find((f) => f.strategy === "least-loaded" && f.figure === "p50");
    expect(ll?.points).toBe(3);
    // Ratios 0.8, 1.0, 0.8: the median point's 0.8; misses |ln 0.8|, 0, |ln 0.8|.
    expect(ll?.ratio).toBeCloseTo(0.8, 9);
    expect(ll?.miss).toBeCloseTo((2 * Math.abs(Math.log(0.8))) / 3, 9);
    expect(fits.find((f) => f.strategy === "prefix-aware" && f.figure === "p95")?.ratio).toBeCloseTo(1, 9);
    const md = renderVirtualReport({ command: "c", date: "d", commit: "x", hop_ms: 10, jitter_seeds: 4, fleet_fit: { against: "the fleet's runs", fits }, runs });
    expect(md).toContain("### Against the fleet");
    expect(md).toMatch(/\| roomy \| least-loaded \| 3 \| 0\.800 \| 14\.9% \| 0\.800 \| 14\.9% \|/);
    expect(md).toMatch(/\| roomy \| prefix-aware \| 1 \| 1\.000 \| 0\.0% \| 1\.000 \| 0\.0% \|/);
  });

  it("pairs an open-loop trace's seeds with the fleet's runs of the same seeds, kv_hit beside TTFT", () => {
    // Slices 1 and 2 here, 3 draws each; the fleet ran slices 1-3.
    const runs: VirtualRun[] = [1, 2].flatMap((seed) =>
      Array.from({ length: 3 }, (_, d) => ({
        trace: "mooncake" as const, seed, strategy: "prefix-aware", shards: 1, jitter_seed: d + 1, hop_ms: 20, requests: 10, errors: 0,
        kv_hit: seed === 1 ? 0.05 : 0.06, kv_ceiling: 0.1, ttft_ms: { p50: 1000 * seed + (d - 1) * 10, p95: 4000, p99: 5000 }, goodput_share: 1, backend_share: {}, virtual_ms: 1,
      })),
    );
    const fleet = [1, 2, 3].map((seed) => ({ trace: "mooncake", seed, strategy: "prefix-aware", kv_hit: 0.05, ttft_ms: { p50: 1000, p95: 5000, p99: 6000 } }));
    const fits = openLoopFleetFit(runs, fleet);
    const at = (figure: string) => fits.find((f) => f.figure === figure);
    expect(at("kv_hit")?.points).toBe(2);
    expect(at("kv_hit")?.trace).toBe("mooncake");
    // Ratios 1 and 1.2 (two seeds: the median takes the higher); p50 1 and 2; p95 0.8 at both.
    expect(at("kv_hit")?.miss).toBeCloseTo(Math.log(1.2) / 2, 9);
    expect(at("p50")?.miss).toBeCloseTo(Math.log(2) / 2, 9);
    expect(at("p95")?.ratio).toBeCloseTo(0.8, 9);
    const md = renderVirtualReport({ command: "c", date: "d", commit: "x", hop_ms: 20, jitter_seeds: 3, fleet_fit: { against: "the fleet's runs", fits }, runs });
    expect(md).toMatch(/\| prefix-aware \| 2 \| 1\.\d{3} \| 9\.1% \| \d\.\d{3} \| 34\.7% \| 0\.800 \| 22\.3% \|/);
    // The delays the runs drew, named where the report says what they stand for.
    expect(md).toContain("another draw of the hops (0–20 ms per request, seeded).");
    const split = runs.map((r) => ({ ...r, hop_ms: 10, pre_route_hop_ms: 10, ms_per_mb: 50 }));
    expect(renderVirtualReport({ command: "c", date: "d", commit: "x", hop_ms: 10, jitter_seeds: 3, runs: split })).toContain(
      "another draw of the hops (0–10 ms per request before it is routed, after its body's read at 50 ms per MB, and 0–10 ms after, seeded).",
    );
    // The method as the runs were made, when the results keep it: --report-only renders what was run, not what the code says now.
    expect(md).toContain(OPEN_LOOP_SETUPS.mooncake.method);
    const kept = renderVirtualReport({ command: "c", date: "d", commit: "x", hop_ms: 20, jitter_seeds: 3, methods: { mooncake: "Six slices, as they were run then." }, runs });
    expect(kept).toContain("Six slices, as they were run then.");
    expect(kept).not.toContain(OPEN_LOOP_SETUPS.mooncake.method);
  });
});
