/** Percentiles and the median of repeated runs: the only statistics the benchmark reports. */

/** Nearest-rank percentile of an ascending array; null when there are no samples. */
export function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

export function ascending(values: readonly number[]): number[] {
  return [...values].sort((a, b) => a - b);
}

/** Rounds for the report: figures below 10 keep two decimals, larger ones one. */
export function round(x: number | null): number | null {
  if (x === null || !Number.isFinite(x)) return null;
  return Math.abs(x) < 10 ? Math.round(x * 100) / 100 : Math.round(x * 10) / 10;
}

/** The run whose `key` is the median of the repeats (the lower middle for an even count). */
export function medianRun<T>(runs: readonly T[], key: (r: T) => number): T {
  if (runs.length === 0) throw new Error("no runs");
  const sorted = [...runs].sort((a, b) => key(a) - key(b));
  return sorted[Math.floor((sorted.length - 1) / 2)] as T;
}
