/**
 * Issue 15's targets (which replaced issue 4's), each a ratio or a difference between median runs
 * of the same benchmark run (absolute figures from a shared 2-core machine mean little; ratios
 * within a run do). Issue 4's figures stay among the ratios, without a goal.
 *
 * A verdict is taken on the figures as measured; only the value and basis shown are rounded. A
 * ratio of 0.8951 shows as 0.9 and misses ">= 0.9" (judged on the rounded value it was met).
 */
import type { Scenario } from "./measure.ts";
import { find, keyOf, type Figures } from "./summary.ts";
import { round } from "../stats/round.ts";

export interface Check {
  what: string;
  goal: string;
  /** Rounded for the report (bench/stats/round.ts); `met` was judged on the unrounded value, which `basis` ends with. */
  value: number | null;
  /** null when a figure it needs was not measured (target skipped or not installed). */
  met: boolean | null;
  /** How the value was computed, with the figures it came from. */
  basis: string;
}

const NS50: Scenario = { mode: "nonstream", concurrency: 50, chunks: null };
const ST50_20: Scenario = { mode: "stream", concurrency: 50, chunks: 20 };
const ST50_100: Scenario = { mode: "stream", concurrency: 50, chunks: 100 };
const ST1_20: Scenario = { mode: "stream", concurrency: 1, chunks: 20 };
const ST1_100: Scenario = { mode: "stream", concurrency: 1, chunks: 100 };

type Pick = (m: Figures) => number | null;
const rps: Pick = (m) => m.rps;
const fullP50: Pick = (m) => m.latency.p50;
const ttftP50: Pick = (m) => m.ttft.p50;

export function evaluate(medians: readonly Figures[], cpuTotals: ReadonlyMap<string, number> = new Map()): Check[] {
  const get = (label: string, s: Scenario, pick: Pick): number | null => {
    const m = find(medians, label, s);
    return m ? pick(m) : null;
  };
  const ratio = (what: string, goal: string, a: string, b: string, s: Scenario, pick: Pick, test: (r: number) => boolean, unit: string): Check => {
    const x = get(a, s, pick);
    const y = get(b, s, pick);
    const exact = x !== null && y !== null && y > 0 ? x / y : null;
    return { what, goal, value: round(exact), met: exact === null ? null : test(exact), basis: `${a} ${fmt(x)} / ${b} ${fmt(y)} ${unit}${unrounded(exact)}` };
  };
  const litellm1 = medians.find((m) => m.target === "litellm" && m.workers === 1)?.label ?? "litellm-1w";
  const cpu: Pick = (m) => cpuTotals.get(keyOf(m.label, m)) ?? null;

  const checks: Check[] = [
    ratio("kvgate / ceiling, non-streaming RPS at c=50", ">= 0.9", "kvgate", "ceiling", NS50, rps, (r) => r >= 0.9, "req/s"),
    ratio("kvgate / ceiling, workerd CPU per request, non-streaming at c=50", "<= 1.15", "kvgate", "ceiling", NS50, cpu, (r) => r <= 1.15, "µs"),
  ];
  const kt = get("kvgate", ST1_20, ttftP50);
  const ft = get("floor", ST1_20, ttftP50);
  const added = kt !== null && ft !== null ? kt - ft : null;
  checks.push({ what: "TTFT added over the floor, p50 at c=1 (ms)", goal: "<= 0.5", value: round(added), met: added === null ? null : added <= 0.5, basis: `kvgate ${fmt(kt)} − floor ${fmt(ft)} ms (20 chunks)${unrounded(added)}` });
  checks.push(ratio("kvgate / floor, 100-chunk full-stream time p50 at c=1", "<= 1.15", "kvgate", "floor", ST1_100, fullP50, (r) => r <= 1.15, "ms"));
  checks.push(ratio("kvgate / Portkey, non-streaming RPS at c=50", ">= 1.3", "kvgate", "portkey", NS50, rps, (r) => r >= 1.3, "req/s"));
  checks.push(ratio("kvgate / LiteLLM (1 worker), non-streaming RPS at c=50", ">= 25", "kvgate", litellm1, NS50, rps, (r) => r >= 25, "req/s"));
  return checks;
}

/** Further ratios the report shows without a goal. */
export function extraRatios(medians: readonly Figures[]): { what: string; value: number | null; basis: string }[] {
  const out: { what: string; value: number | null; basis: string }[] = [];
  const r = (what: string, a: string, b: string, s: Scenario, pick: Pick): void => {
    const x = find(medians, a, s);
    const y = find(medians, b, s);
    const xv = x ? pick(x) : null;
    const yv = y ? pick(y) : null;
    out.push({ what, value: xv !== null && yv !== null && yv > 0 ? round(xv / yv) : null, basis: `${a} ${fmt(xv)} / ${b} ${fmt(yv)}` });
  };
  // Issue 4's figures, its goals withdrawn by issue 15.
  r("kvgate / floor, non-streaming RPS at c=50", "kvgate", "floor", NS50, rps);
  r("kvgate / floor, streaming RPS at c=50, 20 chunks", "kvgate", "floor", ST50_20, rps);
  r("kvgate / floor, streaming RPS at c=50, 100 chunks", "kvgate", "floor", ST50_100, rps);
  r("kvgate-restamp / kvgate, 100-chunk full-stream time p50 at c=1", "kvgate-restamp", "kvgate", ST1_100, fullP50);
  r("ceiling / floor, non-streaming RPS at c=50", "ceiling", "floor", NS50, rps);
  // The ceiling on the c=1 stream target: what any gateway with one routing RPC pays before its own
  // work (its TTFT over the floor's is in the report's TTFT-added table, ttftAdded).
  r("ceiling / floor, 100-chunk full-stream time p50 at c=1", "ceiling", "floor", ST1_100, fullP50);
  r("floor / direct, non-streaming RPS at c=50", "floor", "direct", NS50, rps);
  // What the runtime itself allows: a gateway cannot beat its floor by more than this.
  r("floor / Portkey, non-streaming RPS at c=50", "floor", "portkey", NS50, rps);
  const litellm1 = medians.find((m) => m.target === "litellm" && m.workers === 1)?.label;
  if (litellm1) r("floor / LiteLLM (1 worker), non-streaming RPS at c=50", "floor", litellm1, NS50, rps);
  r("kvgate-restamp / kvgate, streaming RPS at c=50, 100 chunks", "kvgate-restamp", "kvgate", ST50_100, rps);
  r("kvgate / floor, 100-chunk full-stream time p50 at c=50", "kvgate", "floor", ST50_100, fullP50);
  r("kvgate / Portkey, streaming RPS at c=50, 20 chunks", "kvgate", "portkey", ST50_20, rps);
  // A virtual key (its check, its limits in the route call, reading and recording usage) against the master key.
  for (const [base, what] of [["kvgate", "kvgate"], ["floor", "the floor"]] as const) {
    r(`kvgate-key / ${what}, non-streaming RPS at c=50`, "kvgate-key", base, NS50, rps);
    r(`kvgate-key / ${what}, streaming RPS at c=50, 20 chunks`, "kvgate-key", base, ST50_20, rps);
    r(`kvgate-key / ${what}, streaming RPS at c=50, 100 chunks`, "kvgate-key", base, ST50_100, rps);
    r(`kvgate-key / ${what}, 100-chunk full-stream time p50 at c=1`, "kvgate-key", base, ST1_100, fullP50);
  }
  r("kvgate-key / kvgate, TTFT p50 at c=1, 20 chunks", "kvgate-key", "kvgate", ST1_20, ttftP50);
  // Request lines are on by default: kvgate against the same config with sampleRate 0.
  r("kvgate / kvgate-nolog, non-streaming RPS at c=50", "kvgate", "kvgate-nolog", NS50, rps);
  r("kvgate / kvgate-nolog, streaming RPS at c=50, 20 chunks", "kvgate", "kvgate-nolog", ST50_20, rps);
  // Feedback reads every answer's usage here (feedback.sampleRate 1): what one sampled request costs.
  r("kvgate-feedback / kvgate, non-streaming RPS at c=50", "kvgate-feedback", "kvgate", NS50, rps);
  r("kvgate-feedback / kvgate, streaming RPS at c=50, 20 chunks", "kvgate-feedback", "kvgate", ST50_20, rps);
  // The group over 2 routing objects: the Worker keys each prompt and picks its shard.
  r("kvgate-sharded / kvgate, non-streaming RPS at c=50", "kvgate-sharded", "kvgate", NS50, rps);
  r("kvgate-sharded / kvgate, TTFT p50 at c=1, 20 chunks", "kvgate-sharded", "kvgate", ST1_20, ttftP50);
  // Every deployment ordering its queue by priority: the gateway sets each request's.
  r("kvgate-priority / kvgate, non-streaming RPS at c=50", "kvgate-priority", "kvgate", NS50, rps);
  r("kvgate-priority / kvgate, TTFT p50 at c=1, 20 chunks", "kvgate-priority", "kvgate", ST1_20, ttftP50);
  for (const m of medians.filter((x) => x.target === "litellm" && x.mode === "nonstream" && x.concurrency === 50)) {
    r(`kvgate / LiteLLM (${m.workers} worker${m.workers === 1 ? "" : "s"}), non-streaming RPS at c=50`, "kvgate", m.label, NS50, rps);
  }
  // --baseline: this checkout's kvgate against another's, measured in turns in the same run.
  for (const base of new Set(medians.filter((m) => m.label.startsWith("kvgate@")).map((m) => m.label))) {
    r(`kvgate / ${base}, non-streaming RPS at c=50`, "kvgate", base, NS50, rps);
    r(`kvgate / ${base}, streaming RPS at c=50, 20 chunks`, "kvgate", base, ST50_20, rps);
    r(`kvgate / ${base}, streaming RPS at c=50, 100 chunks`, "kvgate", base, ST50_100, rps);
    r(`kvgate / ${base}, 100-chunk full-stream time p50 at c=1`, "kvgate", base, ST1_100, fullP50);
    r(`kvgate / ${base}, TTFT p50 at c=1, 20 chunks`, "kvgate", base, ST1_20, ttftP50);
  }
  return out;
}

/** A figure as the report shows it. */
function fmt(x: number | null): string {
  return x === null ? "n/a" : String(round(x));
}

/** The value a verdict was judged on, to four significant digits: the rounded one may sit on the other side of the goal. */
function unrounded(x: number | null): string {
  return x === null ? "" : ` = ${Number(x.toPrecision(4))}`;
}

/** TTFT p50 each target adds over the floor, at c=1 with 20 chunks. */
export function ttftAdded(medians: readonly Figures[]): { label: string; addedMs: number | null }[] {
  const floor = find(medians, "floor", ST1_20)?.ttft.p50 ?? null;
  return medians
    .filter((m) => m.mode === "stream" && m.concurrency === 1 && m.chunks === 20 && m.label !== "floor")
    .map((m) => ({ label: m.label, addedMs: floor === null || m.ttft.p50 === null ? null : round(m.ttft.p50 - floor) }));
}
