import { openLoopKvRule, ttftRuleOf } from "../replay/index.ts";
import { boundedRatioMark, mean, RATIO_MARKS, type PercentileName } from "../stats/quantiles.ts";
import { OPEN_LOOP_SETUPS, isOpenLoopTrace } from "../routing/open-loop-matrix.ts";
import type { TimedKind } from "../traces/index.ts";
import { PRIORITY_SUFFIX } from "../routing/matrix.ts";
import type { VirtualRun } from "./point.ts";
import { pooled, ratioWithInterval, type Ratio } from "./stats.ts";
import type { FitFigure, FleetFit } from "./fleet-fit.ts";

export interface VirtualResults {
  command: string;
  date: string;
  commit: string;
  /** The hops' bound every run had; null when the traces had different ones (each run names its own). */
  hop_ms: number | null;
  jitter_seeds: number;
  /** The Worker before f50698c: no prompt size beside a cut chain. Absent in results made before the flag. */
  chain_only?: boolean;
  /** The runs against the same points and seeds on the fleet (fleet-fit.ts), and which fleet results; absent when none were at hand. */
  fleet_fit?: { against: string; fits: FleetFit[] };
  /**
   * Each open-loop trace's method as the runs were made (OPEN_LOOP_SETUPS), so that --report-only
   * describes them and not what the code says today. Absent in results made before it was kept.
   */
  methods?: Partial<Record<TimedKind, string>>;
  /** How ttft_ms counts requests that timed out (bench/replay/stats.ts TTFT_RULE); absent in results made before timeouts were counted (they were left out). */
  ttft_rule?: string;
  runs: VirtualRun[];
}


/** How lower bounds carry into the report's means and ratios. */
/** The TTFT rule the results were made by, and what its bounds do to means and ratios; results made before it have none. */
const ttftRuleWithBounds = (results: { ttft_rule?: string }) => (results.ttft_rule ? `${ttftRuleOf(results)} A mean with such a bound in it is one too (≥). ${RATIO_MARKS}` : ttftRuleOf(results));

/** Issue 15: a group over shards keeps one object's kv_hit within this much. */
export const SHARD_KV_TOLERANCE = 0.02;

const kv = (r: VirtualRun) => r.kv_hit;
const ttft = (name: PercentileName) => (r: VirtualRun) => r.ttft_ms[name];
const p50 = ttft("p50");
const p95 = ttft("p95");
/** The trace's ceiling over all its requests (kv_ceiling in runs that predate kv_ceiling_trace, where it was that). */
const traceCeiling = (r: VirtualRun) => r.kv_ceiling_trace ?? r.kv_ceiling;

/** Whether a TTFT figure of any of `runs` is a lower bound (timeouts reach it): a mean over them is one too. */
const bounded = (runs: readonly VirtualRun[], name: PercentileName) => runs.some((r) => r.ttft_ms.at_least?.includes(name));
/** "≥ " before a pooled TTFT figure that is a lower bound. */
const ge = (runs: readonly VirtualRun[], name: PercentileName) => (bounded(runs, name) ? "≥ " : "");
/** boundedRatioMark of `a`'s TTFT figure over `b`'s. */
const boundMark = (a: readonly VirtualRun[], b: readonly VirtualRun[], name: PercentileName) => boundedRatioMark(bounded(a, name), bounded(b, name));
/** `a`'s TTFT percentile over `b`'s, with its interval and boundMark. */
const ttftInterval = (a: readonly VirtualRun[], b: readonly VirtualRun[], name: PercentileName) => `${boundMark(a, b, name)}${interval(ratioWithInterval(a, b, ttft(name)))}`;
const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : "–");
const f4 = (x: number) => (Number.isFinite(x) ? x.toFixed(4) : "–");
const ms = (x: number) => (Number.isFinite(x) ? String(Math.round(x)) : "–");
const pct = (x: number) => `${x >= 1 ? "+" : "−"}${Math.abs((x - 1) * 100).toFixed(1)}%`;
const interval = (r: Ratio) => `${f3(r.ratio)} (${f3(r.low)}–${f3(r.high)})`;

/** Whether an interval of a ratio shows it within `tolerance` of 1, shows it outside, or shows neither. */
export function verdict(r: Ratio, tolerance: number): "within" | "outside" | "not shown" {
  if (r.low >= 1 - tolerance && r.high <= 1 + tolerance) return "within";
  if (r.high < 1 - tolerance || r.low > 1 + tolerance) return "outside";
  return "not shown";
}

/** What delays a request on its way, as the runs had it: the hops' bounds, and the body's read where there was one. */
function delaysOf(runs: readonly VirtualRun[]): string {
  const values = (of: (r: VirtualRun) => number) => [...new Set(runs.map(of))].filter((x) => x > 0).join(", ");
  const hops = [...new Set(runs.map((r) => r.hop_ms))].join(", ");
  const pre = values((r) => r.pre_route_hop_ms ?? 0);
  const reads = values((r) => r.ms_per_mb ?? 0);
  const read = reads ? `its body's read at ${reads} ms per MB` : "";
  if (pre) return `hops (0–${pre} ms per request before it is routed${read ? `, after ${read},` : ""} and 0–${hops} ms after, seeded)`;
  return `hops (0–${hops} ms per request, seeded)${read ? `, each after ${read}` : ""}`;
}

function routersOf(runs: readonly VirtualRun[]): string[] {
  return [...new Set(runs.map((r) => r.strategy))];
}

export function renderVirtualReport(results: VirtualResults): string {
  const lines = ["# Routing in virtual time", "", `Command: \`${results.command}\` — ${results.date}, at ${results.commit}.`, ""];
  if (results.chain_only) lines.push("`--chain-only`: the Worker as it was before f50698c, sending no prompt size beside a fingerprint cut at maxPrefixBlocks, so the router queues such a prompt as its chain's length.", "");
  const closed = results.runs.filter((r) => !isOpenLoopTrace(r.trace));
  if (closed.length > 0) lines.push(...closedLoopPart(closed, results));
  for (const trace of [...new Set(results.runs.map((r) => r.trace))]) if (isOpenLoopTrace(trace)) lines.push(...traceSection(trace, results.runs.filter((r) => r.trace === trace), results));
  return `${lines.join("\n")}\n`;
}

/** Prefix-aware is kvgate's router; the other strategies are the baselines it must meet (issue 14's goal (a)). */
const KVGATE_ROUTER = "prefix-aware";

interface Versus {
  /** The baseline with the lowest figure at the point. */
  best: string;
  ratio: Ratio;
  /** Where lower bounds in it put the truth (boundMark). */
  mark: ReturnType<typeof boundMark>;
}

/** Prefix-aware's TTFT percentile over the best baseline's at one point, with its interval. */
function versusBest(runs: readonly VirtualRun[], baselines: readonly string[], name: PercentileName): Versus | null {
  const of = (router: string) => runs.filter((r) => r.strategy === router);
  const figure = ttft(name);
  const mine = of(KVGATE_ROUTER);
  const present = baselines.filter((b) => of(b).length > 0);
  if (mine.length === 0 || present.length === 0) return null;
  const best = present.reduce((a, b) => (pooled(of(b), figure) < pooled(of(a), figure) ? b : a));
  return { best, ratio: ratioWithInterval(mine, of(best), figure), mark: boundMark(mine, of(best), name) };
}

/**
 * "above" when the whole interval lies above 1 (prefix-aware shown slower), "at or below" when it
 * lies at or below 1, "not shown" otherwise, or when lower bounds in the ratio leave its truth on
 * the other side (a ratio that is at least its value cannot show "at or below", nor one at most it "above").
 */
function side(v: Pick<Versus, "ratio" | "mark">): "above" | "at or below" | "not shown" {
  const r = v.ratio;
  if (r.low > 1 && (v.mark === "" || v.mark === "≥ ")) return "above";
  if (r.high <= 1 && (v.mark === "" || v.mark === "≤ ")) return "at or below";
  return "not shown";
}

/**
 * bench:routing's closed-loop points (every session at once, turns in order) in virtual time: the
 * routing alone, without workerd, the sockets or a busy machine, so that what prefix-aware's TTFT
 * loses to a baseline on the fleet can be told apart from what its routing loses.
 */
function closedLoopPart(runs: readonly VirtualRun[], results: VirtualResults): string[] {
  const routers = routersOf(runs);
  const baselines = routers.filter((r) => r !== KVGATE_ROUTER && !r.includes("@") && !r.endsWith(PRIORITY_SUFFIX));
  const seeds = [...new Set(runs.map((r) => r.seed))].sort((a, b) => a - b);
  const sections = [...new Set(runs.map((r) => `${r.regime} · ${r.trace}`))];
  const lines = [
    "## Closed loop",
    "",
    `bench:routing's closed-loop points: a fleet of 4 simulated workers at the regime's preset and time scale (fresh caches), every session at once, each session's turns in order with no pause, a reply appended as the fleet's replay appends it; the same traces, seeds and kvgate config as bench:routing. ` +
      `Seeds ${seeds.join(", ")}, each replayed ${results.jitter_seeds} times per router with another draw of the ${delaysOf(runs)}: what the fleet's runs add, fitted to them (*Against the fleet*, below). ` +
      "A figure is the mean over a seed's draws, then over the seeds; a ratio's interval is the 95% bootstrap over the draws, the two routers' runs of a draw resampled as a pair. " +
      "What is left out is what the fleet runs add on this machine: workerd, the sockets, the processes sharing 2 cores.",
    "",
    `${ttftRuleWithBounds(results)}`,
    "",
  ];
  const summary: { point: string; figure: string; v: Versus }[] = [];
  const body: string[] = [];
  for (const section of sections) {
    const at = runs.filter((r) => `${r.regime} · ${r.trace}` === section);
    const points = [...new Set(at.map((r) => r.sessions ?? 0))].sort((a, b) => a - b);
    body.push(
      `### ${section}`,
      "",
      `| sessions | kv_hit ceiling | ${routers.map((r) => `${r} kv_hit · TTFT p50 / p95 ms`).join(" | ")} | ${KVGATE_ROUTER} p50 ÷ best baseline's | p95 ÷ best baseline's |`,
      `| --- | --- | ${routers.map(() => "---").join(" | ")} | --- | --- |`,
    );
    for (const n of points) {
      const point = at.filter((r) => r.sessions === n);
      const of = (router: string) => point.filter((r) => r.strategy === router);
      const cells = routers.map((router) => `${f3(pooled(of(router), kv))} · ${ge(of(router), "p50")}${ms(pooled(of(router), p50))} / ${ge(of(router), "p95")}${ms(pooled(of(router), p95))}`);
      const vs = (["p50", "p95"] as const).map((name) => {
        const v = versusBest(point, baselines, name);
        if (!v) return "–";
        summary.push({ point: `${section} ${n}`, figure: name, v });
        return `${v.mark}${interval(v.ratio)} (${v.best})`;
      });
      body.push(`| ${n} | ${f3(pooled(of(routers[0] as string), traceCeiling))} | ${cells.join(" | ")} | ${vs.join(" | ")} |`);
    }
    body.push("");
  }
  if (summary.length > 0) {
    const list = (which: ReturnType<typeof side>) => summary.filter((x) => side(x.v) === which);
    const named = (xs: typeof summary) => (xs.length === 0 ? "none" : xs.map((x) => `${x.point} ${x.figure} ${x.v.mark}${f3(x.v.ratio.ratio)} × ${x.v.best}'s`).join("; "));
    lines.push(
      `${KVGATE_ROUTER}'s TTFT p50 and p95 against the best of ${baselines.join(", ")} at each point (${summary.length} figures): at or below it ${list("at or below").length}; above it (the interval wholly above 1) ${list("above").length} — ${named(list("above"))}; not shown either way ${list("not shown").length} — ${named(list("not shown"))}.`,
      "",
    );
  }
  return [...lines, ...body, ...fleetFitSection(results)];
}

function fleetFitSection({ fleet_fit: fit, runs }: VirtualResults): string[] {
  const fits = fit?.fits.filter((f) => f.trace === undefined) ?? [];
  if (!fit || fits.length === 0) return [];
  return [
    "### Against the fleet",
    "",
    `Each point's figure here over the same point's on the fleet (${fit.against}; the median over its seeds), per regime and router: the median point's ratio, and the mean miss: |ln(here ÷ there)| averaged over the points, as a percentage. The delays — ${delaysOf(runs.filter((r) => r.regime !== undefined))} — stand for what the fleet's runs add; this says how well.`,
    "",
    ...fitTable(fits, ["p50", "p95"], ["regime", "router", "points"], (f) => [f.regime, f.strategy, String(f.points)]),
    "",
  ];
}

/** An open-loop trace's runs against the fleet's runs of the same seeds. */
function openLoopFitSection(trace: TimedKind, results: VirtualResults): string[] {
  const fits = results.fleet_fit?.fits.filter((f) => f.trace === trace) ?? [];
  if (!results.fleet_fit || fits.length === 0) return [];
  return [
    "### Against the fleet",
    "",
    `Each seed's figure here (the mean over its draws) over the fleet's run of the same seed (${results.fleet_fit.against}), per router: the median seed's ratio, and the mean miss: |ln(here ÷ there)| averaged over the seeds, as a percentage. The fleet's runs were made at different commits (routing.md names them).`,
    "",
    ...fitTable(fits, ["kv_hit", "p50", "p95"], ["router", "seeds"], (f) => [f.strategy, String(f.points)]),
  ];
}

const FIT_NAMES: Record<FitFigure, string> = { kv_hit: "kv_hit", p50: "TTFT p50", p95: "TTFT p95" };

/** One row per label (a regime and router, or a router), the figures side by side. */
function fitTable(fits: readonly FleetFit[], figures: readonly FitFigure[], heads: readonly string[], labels: (f: FleetFit) => string[]): string[] {
  const rows = new Map<string, { labels: string[]; at: Partial<Record<FitFigure, FleetFit>> }>();
  for (const f of fits) {
    const cells = labels(f);
    const key = cells.join(" ");
    const row = rows.get(key) ?? { labels: cells, at: {} };
    row.at[f.figure] = f;
    rows.set(key, row);
  }
  const lines = [`| ${[...heads, ...figures.flatMap((g) => [`${FIT_NAMES[g]} ÷ the fleet's`, "mean miss"])].join(" | ")} |`, `| ${Array.from({ length: heads.length + 2 * figures.length }, () => "---").join(" | ")} |`];
  for (const { labels: cells, at } of rows.values()) {
    lines.push(`| ${[...cells, ...figures.flatMap((g) => { const f = at[g]; return f ? [f3(f.ratio), `${(f.miss * 100).toFixed(1)}%`] : ["–", "–"]; })].join(" | ")} |`);
  }
  return lines;
}

function traceSection(trace: TimedKind, runs: readonly VirtualRun[], results: VirtualResults): string[] {
  const routers = routersOf(runs);
  const of = (router: string) => runs.filter((r) => r.strategy === router);
  const seeds = [...new Set(runs.map((r) => r.seed))].sort((a, b) => a - b);
  const base = routers.includes("prefix-aware") ? "prefix-aware" : (routers[0] as string);
  const lines = [
    `## ${trace}`,
    "",
    `${results.methods?.[trace] ?? OPEN_LOOP_SETUPS[trace].method}`,
    "",
    `Seeds ${seeds.join(", ")} of that trace, each replayed ${results.jitter_seeds} times per router, each time with another draw of the ${delaysOf(runs)}. ` +
      "A router's figure is the mean over a seed's draws, then over the seeds, each seed weighing the same; TTFT percentiles are each run's, averaged so. " +
      `A ratio's interval is the 95% bootstrap interval over the draws (the two routers' runs of a draw resampled as a pair, within each seed). Requests: ${of(base).reduce((n, r) => n + r.requests, 0) / results.jitter_seeds} per draw over the seeds.`,
    "",
    `${ttftRuleWithBounds(results)} ${openLoopKvRule(runs)} "Of the ceiling" is each router's kv_hit over its own runs' ceiling; the tables' ceiling columns are the whole trace's.`,
    "",
    `| router | kv_hit | of the ceiling | kv_hit ÷ ${base}'s | TTFT p50 ms | p95 | p99 | p95 ÷ ${base}'s | errors per draw |`,
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const router of routers) {
    const rs = of(router);
    const versus = router === base ? "1" : interval(ratioWithInterval(rs, of(base), kv));
    const p95Versus = router === base ? "1" : ttftInterval(rs, of(base), "p95");
    const errors = rs.reduce((n, r) => n + r.errors, 0) / results.jitter_seeds;
    const pct = (["p50", "p95", "p99"] as const).map((name) => `${ge(rs, name)}${ms(pooled(rs, ttft(name)))}`);
    lines.push(`| ${router} | ${f4(pooled(rs, kv))} | ${f3(pooled(rs, kv) / pooled(rs, (r) => r.kv_ceiling))} | ${versus} | ${pct.join(" | ")} | ${p95Versus} | ${errors.toFixed(1)} |`);
  }
  lines.push("", ...shardSection(runs, routers), "", ...prioritySection(trace, runs, routers), "", ...openLoopFitSection(trace, results), "", ...perSeedTable(runs, routers, seeds), "");
  return lines;
}

function shardSection(runs: readonly VirtualRun[], routers: readonly string[]): string[] {
  const one = runs.filter((r) => r.strategy === "prefix-aware");
  const sharded = routers.filter((r) => r.startsWith("prefix-aware@"));
  if (one.length === 0 || sharded.length === 0) return [];
  const lines = [
    "### Over shards",
    "",
    `Issue 15: a group split over N routing objects keeps one object's kv_hit within ${SHARD_KV_TOLERANCE * 100}%. kv_hit's ratio has two 95% intervals: over the draws (these seeds, another draw of the hops), and over the seeds (the seeds resampled as a sample of the trace's traffic, each with all its draws). The verdict reads the one over the seeds: "within" when the whole interval lies within it, "outside" when the whole interval lies outside it, "not shown" otherwise.`,
    "",
    "| router | kv_hit ÷ one object's, over the draws | over the seeds | within 2% | TTFT p50 ÷ one object's | p95 ÷ one object's |",
    "| --- | --- | --- | --- | --- | --- |",
  ];
  for (const router of sharded) {
    const rs = runs.filter((r) => r.strategy === router);
    const k = ratioWithInterval(rs, one, kv, "seeds");
    lines.push(`| ${router} | ${interval(ratioWithInterval(rs, one, kv))} | ${interval(k)} | ${verdict(k, SHARD_KV_TOLERANCE)} | ${ttftInterval(rs, one, "p50")} | ${ttftInterval(rs, one, "p95")} |`);
  }
  return lines;
}

/** Each router in front of engines that order their queues by the priority kvgate sets, against the same router in front of first-come-first-served engines. */
function prioritySection(trace: TimedKind, runs: readonly VirtualRun[], routers: readonly string[]): string[] {
  const pairs = routers.filter((r) => r.endsWith(PRIORITY_SUFFIX) && routers.includes(r.slice(0, -PRIORITY_SUFFIX.length)));
  if (pairs.length === 0) return [];
  const of = (router: string) => runs.filter((r) => r.strategy === router);
  const lines = [
    "### Engines ordered by priority",
    "",
    "`+priority`: the workers admit waiting requests by their `priority`, lower first (vLLM `--scheduling-policy priority`), and kvgate sets it on each request to its arrival plus its own uncached prefill at the backend's rate (the deployment's `schedulingPolicy: \"priority\"`; src/routing/engine-priority.ts). Each against the same router in front of first-come-first-served workers:",
    "",
    "| router | kv_hit ÷ fcfs | TTFT p50 ÷ fcfs | p95 ÷ fcfs | p99 ÷ fcfs |",
    "| --- | --- | --- | --- | --- |",
  ];
  for (const router of pairs) {
    const rs = of(router);
    const fcfs = of(router.slice(0, -PRIORITY_SUFFIX.length));
    lines.push(`| ${router} | ${interval(ratioWithInterval(rs, fcfs, kv))} | ${ttftInterval(rs, fcfs, "p50")} | ${ttftInterval(rs, fcfs, "p95")} | ${ttftInterval(rs, fcfs, "p99")} |`);
  }
  const best = `prefix-aware${PRIORITY_SUFFIX}`;
  const against = ["round-robin", `round-robin${PRIORITY_SUFFIX}`, "least-loaded", `least-loaded${PRIORITY_SUFFIX}`].filter((r) => routers.includes(r));
  if (trace === "mooncake" && routers.includes(best) && against.length > 0) {
    lines.push("", `Issue 14's Mooncake goal compares TTFT p95 with round-robin's (≤ 0.5 ×) and least-loaded's (≤ 0.8 ×): ${best}'s p95 over ` + against.map((r) => `${r}'s ${ttftInterval(of(best), of(r), "p95")}`).join(", ") + ".");
  }
  return lines;
}

function perSeedTable(runs: readonly VirtualRun[], routers: readonly string[], seeds: readonly number[]): string[] {
  const lines = [
    "### Each seed",
    "",
    "kv_hit: the mean over the draws (lowest–highest draw); TTFT: the mean of the draws' percentiles. A seed's changes between draws are the chaos a few ms can set off: which requests find their prefix, on a trace whose hits are a few long prompts.",
    "",
    `| seed | ceiling | ${routers.map((r) => `${r} kv_hit · p50 / p95 ms`).join(" | ")} |`,
    `| --- | --- | ${routers.map(() => "---").join(" | ")} |`,
  ];
  for (const seed of seeds) {
    const at = runs.filter((r) => r.seed === seed);
    const cells = routers.map((router) => {
      const rs = at.filter((r) => r.strategy === router);
      const kvs = rs.map((r) => r.kv_hit ?? NaN);
      return `${f4(mean(kvs))} (${f4(Math.min(...kvs))}–${f4(Math.max(...kvs))}) · ${ge(rs, "p50")}${ms(mean(rs.map((r) => r.ttft_ms.p50 ?? NaN)))} / ${ge(rs, "p95")}${ms(mean(rs.map((r) => r.ttft_ms.p95 ?? NaN)))}`;
    });
    lines.push(`| ${seed} | ${f4((at[0] && traceCeiling(at[0])) ?? NaN)} | ${cells.join(" | ")} |`);
  }
  const one = runs.filter((r) => r.strategy === "prefix-aware");
  const sharded = routers.filter((r) => r.startsWith("prefix-aware@"));
  if (one.length > 0 && sharded.length > 0) {
    lines.push("", "Each seed's kv_hit over shards against one object's (means over the draws): " + sharded.map((router) => `${router} ${seeds.map((s) => pct(mean(runs.filter((r) => r.seed === s && r.strategy === router).map((r) => r.kv_hit ?? NaN)) / mean(one.filter((r) => r.seed === s).map((r) => r.kv_hit ?? NaN)))).join(", ")}`).join("; ") + ".");
  }
  return lines;
}
