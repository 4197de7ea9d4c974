/**
 * From repeated measurements to reported figures: per target and scenario, each figure the median
 * over the repeats of that figure, in the exact shape of overhead.json's "runs", and a lookup for
 * the ratios. Not one repeat's figures (the repeat with the median req/s): its TTFT and stream time
 * were that repeat's, whatever the others measured, and a TTFT target then compared two single
 * repeats. Figures stay unrounded here (the checks judge them so); toRun() and roundDistribution()
 * round what is written.
 */
import { scenarioKey, type Distribution, type Measurement, type Scenario } from "./measure.ts";
import { median } from "../stats/quantiles.ts";
import { round } from "../stats/round.ts";
import type { TargetName } from "./targets.ts";

/** One element of overhead.json's "runs" — the schema issue 4 fixes; issue 15 adds cpu_us_per_request only. Each figure is a median over repeats. */
export interface RunRecord {
  target: TargetName;
  mode: "nonstream" | "stream";
  concurrency: number;
  chunks: number | null;
  rps: number;
  latency_ms: { p50: number | null; p95: number | null; p99: number | null };
  ttft_ms: { p50: number | null; p95: number | null };
  errors: number;
  do_calls_per_request: number | null;
  /** LiteLLM only: its worker processes (it is run twice, with 1 and with one per core). */
  workers?: number;
  /** workerd CPU per request, the Worker's and its Durable Object's, where it was split (cpuSplits). */
  cpu_us_per_request?: CpuSplit;
}

export interface CpuSplit {
  worker: number;
  object: number;
}

/** A label's figures in one scenario: each the median over its repeats of that figure, unrounded (errors too). */
export type Figures = Pick<Measurement, "label" | "target" | "workers" | "mode" | "concurrency" | "chunks" | "rps" | "latency" | "ttft" | "errors" | "doCallsPerRequest" | "overheadHeader">;

/** Each repeat's figures of one label and scenario, rounded, in the order measured: what the medians are the medians of. */
export interface RepeatFigures {
  rps: number[];
  latency_ms: { p50: (number | null)[]; p95: (number | null)[]; p99: (number | null)[] };
  ttft_ms: { p50: (number | null)[]; p95: (number | null)[] };
  /**
   * Each repeat's workerd CPU per completed request, µs: the serving process's (`main`) and, for a
   * target whose Durable Objects run in a workerd of their own, that process's (`objects`; null
   * otherwise); absent where CPU was not read. What the CPU target and the Worker/object split are
   * medians of, so either can be checked from the file.
   */
  cpu_us?: { main: (number | null)[]; objects: (number | null)[] };
}

export interface Summary {
  /** Per label and scenario, in measurement order. */
  medians: Figures[];
  /** Per label and scenario (keyOf): each repeat's figures (overhead.json's figures_per_repeat). */
  perRepeat: Record<string, RepeatFigures>;
  /** Per label and scenario (keyOf), where it was split: the median over repeats of each side, unrounded. */
  cpuSplits: Map<string, CpuSplit>;
  /** Per label and scenario, workerd's CPU per request (the serving process, objects apart included): median over repeats, unrounded. */
  cpuTotals: Map<string, number>;
  /** rps of every repeat, rounded, to show the spread behind each median. */
  repeatsRps: Record<string, number[]>;
  /** Errors over all repeats, where there were any. */
  errorsAllRepeats: Record<string, { errors: number; samples: string[] }>;
}

export const keyOf = (label: string, s: Scenario): string => `${label} ${scenarioKey(s)}`;

export function summarise(all: Measurement[]): Summary {
  const groups = new Map<string, Measurement[]>();
  for (const m of all) {
    const k = keyOf(m.label, m);
    const list = groups.get(k);
    if (list) list.push(m);
    else groups.set(k, [m]);
  }
  const medians: Figures[] = [];
  const perRepeat: Record<string, RepeatFigures> = {};
  const repeatsRps: Record<string, number[]> = {};
  const errorsAllRepeats: Record<string, { errors: number; samples: string[] }> = {};
  for (const [k, list] of groups) {
    medians.push(medianFigures(list));
    perRepeat[k] = repeatFigures(list);
    repeatsRps[k] = list.map((m) => round(m.rps) as number);
    const errors = list.reduce((n, m) => n + m.errors, 0);
    if (errors > 0) errorsAllRepeats[k] = { errors, samples: [...new Set(list.flatMap((m) => m.errorSamples))].slice(0, 5) };
  }
  return { medians, perRepeat, repeatsRps, errorsAllRepeats, cpuSplits: cpuSplits(all), cpuTotals: cpuTotals(groups) };
}

/** The repeats of one label and scenario (at least one) as one set of figures, each the median of its own values. */
function medianFigures(list: readonly Measurement[]): Figures {
  const first = list[0] as Measurement;
  const of = (pick: (m: Measurement) => number | null | undefined): number | null => median(list.map(pick).filter((x): x is number => typeof x === "number"));
  const spread = (pick: (m: Measurement) => Distribution | null): Distribution => ({ p50: of((m) => pick(m)?.p50), p95: of((m) => pick(m)?.p95), p99: of((m) => pick(m)?.p99) });
  return {
    label: first.label,
    target: first.target,
    workers: first.workers,
    mode: first.mode,
    concurrency: first.concurrency,
    chunks: first.chunks,
    rps: of((m) => m.rps) as number,
    latency: spread((m) => m.latency),
    ttft: { p50: of((m) => m.ttft.p50), p95: of((m) => m.ttft.p95) },
    errors: of((m) => m.errors) as number,
    doCallsPerRequest: of((m) => m.doCallsPerRequest),
    overheadHeader: list.some((m) => m.overheadHeader) ? spread((m) => m.overheadHeader) : null,
  };
}

function repeatFigures(list: readonly Measurement[]): RepeatFigures {
  const each = (pick: (m: Measurement) => number | null) => list.map((m) => round(pick(m)));
  return {
    rps: list.map((m) => round(m.rps) as number),
    latency_ms: { p50: each((m) => m.latency.p50), p95: each((m) => m.latency.p95), p99: each((m) => m.latency.p99) },
    ttft_ms: { p50: each((m) => m.ttft.p50), p95: each((m) => m.ttft.p95) },
    ...(list.some((m) => m.processCpuUs) ? { cpu_us: { main: each((m) => m.processCpuUs?.main ?? null), objects: each((m) => m.processCpuUs?.objects ?? null) } } : {}),
  };
}

/** A target served in one workerd and its twin with the Durable Objects in a workerd of their own. */
export const APART_TWIN: Readonly<Record<string, string>> = { kvgate: "kvgate-apart", ceiling: "ceiling-apart" };

function cpuTotals(groups: ReadonlyMap<string, Measurement[]>): Map<string, number> {
  const out = new Map<string, number>();
  for (const [k, list] of groups) {
    const totals = list.flatMap((m) => (m.processCpuUs ? [m.processCpuUs.main + (m.processCpuUs.objects ?? 0)] : []));
    const mid = median(totals);
    if (mid !== null) out.set(k, mid);
  }
  return out;
}

/**
 * The Worker's CPU and its Durable Object's, per request. An apart twin's runs split it as
 * measured (its Worker process pays the stub hop between the two processes). A target with a
 * twin is split as bench:ceiling splits it: the object's side is the twin's objects process, the
 * Worker's is the target's one process less that, paired by repeat, then the median of each. The
 * floor has no object: all of its CPU is the Worker's.
 */
export function cpuSplits(all: readonly Measurement[]): Map<string, CpuSplit> {
  const sides = new Map<string, { worker: number[]; object: number[] }>();
  const add = (k: string, worker: number, object: number) => {
    const s = sides.get(k) ?? { worker: [], object: [] };
    s.worker.push(worker);
    s.object.push(object);
    sides.set(k, s);
  };
  const same = (a: Measurement, b: Measurement) => a.repeat === b.repeat && scenarioKey(a) === scenarioKey(b);
  for (const m of all) {
    const cpu = m.processCpuUs;
    if (!cpu) continue;
    const k = keyOf(m.label, m);
    if (cpu.objects !== null) add(k, cpu.main, cpu.objects);
    else if (m.label === "floor") add(k, cpu.main, 0);
    else if (APART_TWIN[m.label]) {
      const twin = all.find((x) => x.label === APART_TWIN[m.label] && same(x, m));
      const object = twin?.processCpuUs?.objects;
      if (object !== undefined && object !== null) add(k, cpu.main - object, object);
    }
  }
  const out = new Map<string, CpuSplit>();
  for (const [k, s] of sides) out.set(k, { worker: median(s.worker) as number, object: median(s.object) as number });
  return out;
}

/** A run as overhead.json writes it: its figures rounded (bench/stats/round.ts). */
export function toRun(m: Figures, split?: CpuSplit): RunRecord {
  return {
    target: m.target,
    mode: m.mode,
    concurrency: m.concurrency,
    chunks: m.chunks,
    rps: round(m.rps) as number,
    latency_ms: roundDistribution(m.latency),
    ttft_ms: { p50: round(m.ttft.p50), p95: round(m.ttft.p95) },
    errors: m.errors,
    do_calls_per_request: round(m.doCallsPerRequest),
    ...(m.workers === undefined ? {} : { workers: m.workers }),
    ...(split ? { cpu_us_per_request: { worker: round(split.worker) as number, object: round(split.object) as number } } : {}),
  };
}

export function roundDistribution(d: Distribution): Distribution {
  return { p50: round(d.p50), p95: round(d.p95), p99: round(d.p99) };
}

/** The figures of `label` in scenario `s`, if it was measured. */
export function find<T extends Figures>(medians: readonly T[], label: string, s: Scenario): T | undefined {
  return medians.find((m) => m.label === label && m.mode === s.mode && m.concurrency === s.concurrency && m.chunks === s.chunks);
}
