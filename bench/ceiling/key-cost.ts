/**
 * What a virtual key adds to kvgate's workerd CPU, from bench:ceiling's runs: kvgate-key and
 * kvgate are measured in turns within each repeat, so each repeat gives one paired difference,
 * which cancels the drift of a shared machine between repeats; the spread is over those.
 *   per request: cpu(kvgate-key) − cpu(kvgate), non-streamed
 *   per stream of N chunks: the same, streamed with N content events
 *   per chunk: (added at H chunks − added at L chunks) / (H − L), for the longest and shortest
 *              streams measured (100 and 1): the per-stream part cancels, the per-event part stays.
 */
import { ascending, median, percentile } from "../stats/quantiles.ts";
import { round } from "../stats/round.ts";

export interface CeilingRun {
  target: string;
  repeat: number;
  rps: number;
  cpu_us_per_request: number;
  errors: number;
  /** Content events per stream; absent for non-streamed runs. */
  chunks?: number;
  /** A target served apart (its Durable Objects in a workerd of their own): each process's CPU per request; cpu_us_per_request is their sum. */
  cpu_split_us_per_request?: { worker: number; object: number };
}

export interface Spread {
  median: number | null;
  q1: number | null;
  q3: number | null;
  min: number | null;
  max: number | null;
  /** How many paired repeats it is over. */
  repeats: number;
}

export function spread(values: readonly number[]): Spread {
  const s = ascending(values);
  return { median: round(percentile(s, 50)), q1: round(percentile(s, 25)), q3: round(percentile(s, 75)), min: round(s[0] ?? null), max: round(s.at(-1) ?? null), repeats: s.length };
}

export const KEY = "kvgate-key";
/** A virtual key with no usage accounting (native pipe): the key check and request limits alone. */
export const KEY_NO_USAGE = "kvgate-key-nousage";
/** kvgate with the restamp hook: its chunks take the same JavaScript read loop as a key's. */
export const RESTAMP = "kvgate-restamp";
export const MASTER = "kvgate";

/** A figure of a run: its CPU per request unless said otherwise; undefined where the run has none. */
export type RunFigure = (r: CeilingRun) => number | undefined;
const cpuFigure: RunFigure = (r) => r.cpu_us_per_request;

/** `figure` of `target` in each repeat (of the runs with `chunks`), by repeat. */
export function byRepeat(runs: readonly CeilingRun[], target: string, chunks: number | undefined, figure: RunFigure = cpuFigure): Map<number, number> {
  const out = new Map<number, number>();
  for (const r of runs) {
    const v = r.target === target && r.chunks === chunks ? figure(r) : undefined;
    if (v !== undefined) out.set(r.repeat, v);
  }
  return out;
}

/** `combine(x, y)` for each repeat present in both, by repeat. */
export function combineByRepeat(xs: ReadonlyMap<number, number>, ys: ReadonlyMap<number, number>, combine: (x: number, y: number) => number): Map<number, number> {
  const out = new Map<number, number>();
  for (const [repeat, x] of xs) {
    const y = ys.get(repeat);
    if (y !== undefined) out.set(repeat, combine(x, y));
  }
  return out;
}

/** `combine(a, b)` of two targets' CPU for each repeat in which both were measured, by repeat. */
function pairedByRepeat(runs: readonly CeilingRun[], a: string, b: string, chunks: number | undefined, combine: (a: number, b: number) => number): Map<number, number> {
  return combineByRepeat(byRepeat(runs, a, chunks), byRepeat(runs, b, chunks), combine);
}

const minus = (a: number, b: number): number => a - b;

export function medianCpu(runs: readonly CeilingRun[], target: string, chunks: number | undefined): number | null {
  return median([...byRepeat(runs, target, chunks).values()]);
}

/** The shortest and longest streams among the runs; null unless there are two lengths. */
function lengthsOf(runs: readonly CeilingRun[]): { lo: number; hi: number } | null {
  const lengths = ascending(runs.map((r) => r.chunks).filter((c): c is number => c !== undefined));
  const lo = lengths[0];
  const hi = lengths.at(-1);
  return lo === undefined || hi === undefined || lo === hi ? null : { lo, hi };
}

export interface PerChunk {
  /** The shortest and longest streams it compares. */
  from_chunks: number;
  to_chunks: number;
  /** Paired per repeat: ((key − kvgate) at to_chunks − (key − kvgate) at from_chunks) / (to − from). */
  added: Spread;
  /** The same formula on the medians of each target and length instead of per repeat. */
  added_from_medians: number | null;
}

/**
 * CPU per chunk that `a` adds over `b` (a virtual key over kvgate by default) from streamed runs
 * of two or more lengths; null with fewer.
 */
export function perChunk(runs: readonly CeilingRun[], a: string = KEY, b: string = MASTER): PerChunk | null {
  const span = lengthsOf(runs);
  if (!span) return null;
  const { lo, hi } = span;
  const high = pairedByRepeat(runs, a, b, hi, minus);
  const low = pairedByRepeat(runs, a, b, lo, minus);
  const values: number[] = [];
  for (const [repeat, h] of high) {
    const l = low.get(repeat);
    if (l !== undefined) values.push((h - l) / (hi - lo));
  }
  const m = (t: string, c: number) => medianCpu(runs, t, c);
  const [kh, kl, vh, vl] = [m(a, hi), m(a, lo), m(b, hi), m(b, lo)];
  const fromMedians = kh !== null && kl !== null && vh !== null && vl !== null ? round((kh - kl - (vh - vl)) / (hi - lo)) : null;
  return { from_chunks: lo, to_chunks: hi, added: spread(values), added_from_medians: fromMedians };
}

/** Each target's own CPU per chunk, (cpu at H − cpu at L) / (H − L) on medians: what a chunk costs the floor, kvgate and kvgate-key. */
export function ownPerChunk(runs: readonly CeilingRun[], targets: readonly string[]): Record<string, number | null> {
  const span = lengthsOf(runs);
  const out: Record<string, number | null> = {};
  for (const t of targets) {
    const h = span && medianCpu(runs, t, span.hi);
    const l = span && medianCpu(runs, t, span.lo);
    out[t] = span && h !== null && l !== null ? round((h - l) / (span.hi - span.lo)) : null;
  }
  return out;
}

export interface PairedCost {
  added: Spread;
  ratio: Spread;
}

/** What `a` adds to `b`'s CPU per request, and its ratio to it, paired per repeat, in runs of one kind. */
export function pairedCost(runs: readonly CeilingRun[], a: string, b: string, chunks: number | undefined): PairedCost {
  const values = (combine: (x: number, y: number) => number) => [...pairedByRepeat(runs, a, b, chunks, combine).values()];
  return { added: spread(values(minus)), ratio: spread(values((x, y) => x / y)) };
}

/** What `target` (a virtual key) adds to kvgate's CPU per request, and its ratio to it, in runs of one kind. */
export function perRequest(runs: readonly CeilingRun[], chunks: number | undefined, target: string = KEY): PairedCost {
  return pairedCost(runs, target, MASTER, chunks);
}
