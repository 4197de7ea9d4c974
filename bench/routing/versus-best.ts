/**
 * The first goal: at every point, prefix-aware's TTFT p50 and p95 at or below the best of
 * least-loaded, round-robin and every peer in the same run, with a 5% allowance only where that
 * best baseline's own seed-to-seed spread is larger than 5%.
 */
import { key, strategiesIn, type Cell } from "./aggregate.ts";
import { kvgateRouter } from "./matrix.ts";
import { boundedRatioMark } from "../stats/quantiles.ts";

export const ALLOWANCE = 1.05;
const KVGATE_BASELINES = ["least-loaded", "round-robin"];

export type Metric = "p50" | "p95";

export interface Comparison {
  sessions: number;
  metric: Metric;
  /** The baseline with the lowest median at this point, and that median. */
  baseline: string;
  best: number;
  /** prefix-aware's median over the best. */
  ratio: number;
  /** The best baseline's highest seed over its lowest (1 with one seed). */
  spread: number;
  /** What the ratio may reach here: 1, or ALLOWANCE where the spread is larger. */
  limit: number;
  /**
   * prefix-aware's median is only a lower bound (requests timed out before their first token reach
   * it), so the ratio is one too and cannot show it within its limit.
   */
  atLeast: boolean;
  /** The best baseline's median is only a lower bound: the ratio overstates, unless atLeast too, when it is either. */
  baselineAtLeast: boolean;
}

/** boundedRatioMark of the comparison's ratio. */
export const comparisonMark = (c: Comparison) => boundedRatioMark(c.atLeast, c.baselineAtLeast);

/** Over its limit, or not shown within it. */
export const overLimit = (c: Comparison): boolean => c.ratio > c.limit || c.atLeast;

/** least-loaded, round-robin and every peer that ran in `runs` (prefix-aware over shards is kvgate's own, not a baseline). */
export function baselinesIn(runs: readonly { strategy: string }[]): string[] {
  return [...KVGATE_BASELINES, ...strategiesIn(runs).filter((s) => kvgateRouter(s) === null)];
}

function spreadOf(cell: Cell, metric: Metric): number {
  const seeds = metric === "p50" ? cell.p50_seeds : cell.p95_seeds;
  const lo = Math.min(...seeds);
  return seeds.length < 2 || lo <= 0 ? 1 : Math.max(...seeds) / lo;
}

/** The baseline with the lowest figure at one point (the first of equals), or undefined where none has one. */
export function bestBaseline(cells: Map<string, Cell>, regime: string, trace: string, sessions: number, baselines: readonly string[], figure: (c: Cell) => number | null): { name: string; cell: Cell; value: number } | undefined {
  let best: { name: string; cell: Cell; value: number } | undefined;
  for (const name of baselines) {
    const cell = cells.get(key(regime, trace, sessions, name));
    const value = cell ? figure(cell) : null;
    if (cell && value !== null && (!best || value < best.value)) best = { name, cell, value };
  }
  return best;
}

/** One comparison per concurrency and metric where prefix-aware and at least one baseline have a figure. */
export function versusBest(cells: Map<string, Cell>, regime: string, trace: string, sessions: number[], baselines: string[]): Comparison[] {
  const out: Comparison[] = [];
  for (const n of sessions) {
    const pa = cells.get(key(regime, trace, n, "prefix-aware"));
    for (const metric of ["p50", "p95"] as const) {
      const mine = pa?.[metric] ?? null;
      if (mine === null) continue;
      const best = bestBaseline(cells, regime, trace, n, baselines, (c) => c[metric]);
      if (!best || best.value <= 0) continue;
      const spread = spreadOf(best.cell, metric);
      out.push({ sessions: n, metric, baseline: best.name, best: best.value, ratio: mine / best.value, spread, limit: spread > ALLOWANCE ? ALLOWANCE : 1, atLeast: pa?.at_least?.includes(metric) ?? false, baselineAtLeast: best.cell.at_least?.includes(metric) ?? false });
    }
  }
  return out;
}

/** The comparison furthest over (or least under) its limit, for one metric. */
export function worstOf(comparisons: Comparison[], metric: Metric): Comparison | undefined {
  let worst: Comparison | undefined;
  for (const c of comparisons) if (c.metric === metric && (!worst || c.ratio / c.limit > worst.ratio / worst.limit)) worst = c;
  return worst;
}
