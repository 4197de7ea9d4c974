import { STRATEGY_ORDER, isKvgateStrategy } from "./matrix.ts";
import type { RoutingResults, RoutingRun } from "./types.ts";
import { boundedPercentile, median as medianOf, type Bounded, type CensoredPercentiles, type PercentileName } from "../stats/quantiles.ts";

/** The figures of one (regime, trace, sessions, strategy) point: medians over seeds. */
export interface Cell {
  kv_hit: number | null;
  p50: number | null;
  p95: number | null;
  p99: number | null;
  /** TTFT p95 of the turns after each session's first (null in results that predate the field). */
  later_p95: number | null;
  total_p50: number | null;
  errors: number;
  requests: number;
  /** TTFT p50 and p95 of each seed's run, for the seed-to-seed spread. */
  p50_seeds: number[];
  p95_seeds: number[];
  /** Largest backend share (median over seeds). */
  max_share: number | null;
  seeds: number;
  /** Those of p50, p95, p99 and later_p95 that are only lower bounds, shown "≥" (ttftMedians). Absent when none is. */
  at_least?: TtftFigure[];
}

export type TtftFigure = PercentileName | "later_p95";

/** A run's TTFT percentiles, as many as it has, and which are lower bounds. */
type TtftOfRun = Partial<Record<PercentileName, number | null>> & Pick<CensoredPercentiles, "at_least">;

/** "≥ " before a cell's figure that is a lower bound. */
export const atLeastMark = (c: Pick<Cell, "at_least">, figure: TtftFigure): string => (c.at_least?.includes(figure) ? "≥ " : "");

/**
 * The median over seeds of one TTFT percentile of each run. A run's percentile that reached
 * requests timed out before their first token is only a lower bound (its `at_least`), and the
 * median is one too when such a figure ranks at or below it (bench/stats/quantiles.ts boundedPercentile).
 */
export function ttftMedian(percentiles: readonly (TtftOfRun | undefined)[], name: PercentileName): Bounded | null {
  const figures: Bounded[] = [];
  for (const t of percentiles) {
    const value = t?.[name];
    if (value !== null && value !== undefined) figures.push({ value, atLeast: t?.at_least?.includes(name) ?? false });
  }
  return boundedPercentile(figures, 50);
}

/** A cell's TTFT figures, medians over its runs, and which are lower bounds. */
export function ttftMedians(runs: readonly { ttft_ms: CensoredPercentiles; ttft_later_turns_ms?: CensoredPercentiles }[]): Pick<Cell, "p50" | "p95" | "p99" | "later_p95" | "at_least"> {
  const medians: Record<TtftFigure, Bounded | null> = {
    p50: ttftMedian(runs.map((r) => r.ttft_ms), "p50"),
    p95: ttftMedian(runs.map((r) => r.ttft_ms), "p95"),
    p99: ttftMedian(runs.map((r) => r.ttft_ms), "p99"),
    later_p95: ttftMedian(runs.map((r) => r.ttft_later_turns_ms), "p95"),
  };
  const atLeast = (Object.keys(medians) as TtftFigure[]).filter((name) => medians[name]?.atLeast);
  const value = (name: TtftFigure) => medians[name]?.value ?? null;
  return { p50: value("p50"), p95: value("p95"), p99: value("p99"), later_p95: value("later_p95"), ...(atLeast.length > 0 ? { at_least: atLeast } : {}) };
}

/** The median over seeds of the figures a run has (bench/stats/quantiles.ts: the lower middle of an even count). */
export function median(values: (number | null)[]): number | null {
  return medianOf(values.filter((x): x is number => x !== null));
}

export const key = (regime: string, trace: string, sessions: number, strategy: string) => `${regime}|${trace}|${sessions}|${strategy}`;

/** The runs by the cell they belong to: the seeds of one point, for their medians. */
export function groupBy<T>(runs: readonly T[], keyOf: (run: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const r of runs) {
    const k = keyOf(r);
    const list = groups.get(k);
    if (list) list.push(r);
    else groups.set(k, [r]);
  }
  return groups;
}

/** What every point's seeds come to: kv_hit and TTFT p50/p95 medians, errors summed, the seeds counted. */
export interface SeedFigures {
  kv_hit: number | null;
  p50: number | null;
  p95: number | null;
  errors: number;
  seeds: number;
}

export function seedFigures(runs: readonly { kv_hit: number | null; ttft_ms: Pick<CensoredPercentiles, "p50" | "p95" | "at_least">; errors: number }[]): SeedFigures {
  return {
    kv_hit: median(runs.map((r) => r.kv_hit)),
    p50: ttftMedian(runs.map((r) => r.ttft_ms), "p50")?.value ?? null,
    p95: ttftMedian(runs.map((r) => r.ttft_ms), "p95")?.value ?? null,
    errors: runs.reduce((n, r) => n + r.errors, 0),
    seeds: runs.length,
  };
}

export function aggregate(results: RoutingResults): Map<string, Cell> {
  const groups = groupBy<RoutingRun>(results.runs, (r) => key(r.regime, r.trace, r.sessions, r.strategy));
  const out = new Map<string, Cell>();
  for (const [k, runs] of groups) {
    out.set(k, {
      kv_hit: median(runs.map((r) => r.kv_hit)),
      ...ttftMedians(runs),
      p50_seeds: runs.map((r) => r.ttft_ms.p50).filter((x): x is number => x !== null),
      p95_seeds: runs.map((r) => r.ttft_ms.p95).filter((x): x is number => x !== null),
      total_p50: median(runs.map((r) => r.total_ms.p50)),
      errors: runs.reduce((n, r) => n + r.errors, 0),
      requests: runs.reduce((n, r) => n + r.requests, 0),
      max_share: median(runs.map((r) => Math.max(...Object.values(r.backend_share)))),
      seeds: runs.length,
    });
  }
  return out;
}

/** Distinct values in run order. */
export function axis<R, T>(runs: readonly R[], pick: (r: R) => T): T[] {
  return [...new Set(runs.map(pick))];
}

/** The strategies and peers of `runs` in column order: kvgate's strategies, then the others as they ran. */
export function strategiesIn(runs: readonly { strategy: string }[]): string[] {
  const present = axis(runs, (r) => r.strategy);
  return [...STRATEGY_ORDER.filter((s) => present.includes(s)), ...present.filter((s) => !isKvgateStrategy(s))];
}
