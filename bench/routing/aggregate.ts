import { STRATEGY_ORDER, isKvgateStrategy } from "./matrix.ts";
import type { RoutingResults, RoutingRun } from "./types.ts";
import { median as medianOf } from "../stats/quantiles.ts";

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

export function seedFigures(runs: readonly { kv_hit: number | null; ttft_ms: { p50: number | null; p95: number | null }; errors: number }[]): SeedFigures {
  return {
    kv_hit: median(runs.map((r) => r.kv_hit)),
    p50: median(runs.map((r) => r.ttft_ms.p50)),
    p95: median(runs.map((r) => r.ttft_ms.p95)),
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
      p50: median(runs.map((r) => r.ttft_ms.p50)),
      p95: median(runs.map((r) => r.ttft_ms.p95)),
      p99: median(runs.map((r) => r.ttft_ms.p99)),
      later_p95: median(runs.map((r) => r.ttft_later_turns_ms?.p95 ?? null)),
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
