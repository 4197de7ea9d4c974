/**
 * The benchmarks' one definition of a percentile and a median.
 *
 * Nearest rank, never interpolated: the p-th percentile of n ascending values is
 * sorted[ceil(p / 100 × n) − 1], the smallest value with at least p% of the values at or below
 * it. A figure is then always a value that was measured (a p99 of 100 samples is the 99th
 * smallest), and the median is the 50th percentile by the same rule: the middle value for an odd
 * count, the lower of the two middle ones for an even count.
 */

export interface Percentiles {
  p50: number | null;
  p95: number | null;
  p99: number | null;
}

export function ascending(values: readonly number[]): number[] {
  return [...values].sort((a, b) => a - b);
}

/** Index of the p-th percentile among n ascending values (n ≥ 1). */
function rankIndex(n: number, p: number): number {
  if (!(p > 0 && p <= 100)) throw new RangeError(`percentile must be in (0, 100], got ${p}`);
  return Math.ceil((p / 100) * n) - 1;
}

/** The p-th percentile of ascending values (see ascending()); null when there are none. */
export function percentile(sorted: readonly number[], p: number): number | null {
  const index = rankIndex(sorted.length, p);
  if (sorted.length === 0) return null;
  // A caller that forgot to sort would get a plausible, wrong figure; this costs one pass.
  for (let i = 1; i < sorted.length; i++) {
    if ((sorted[i] as number) < (sorted[i - 1] as number)) throw new RangeError("percentile needs ascending values: pass them through ascending()");
  }
  return sorted[index] as number;
}

/** p50, p95 and p99 of values in any order; nulls when there are none. */
export function percentiles(values: readonly number[]): Percentiles {
  const sorted = ascending(values);
  return { p50: percentile(sorted, 50), p95: percentile(sorted, 95), p99: percentile(sorted, 99) };
}

/** The median of values in any order; null when there are none. */
export function median(values: readonly number[]): number | null {
  return percentile(ascending(values), 50);
}

/** The item whose `key` is the median of the items' keys, by the same rule as median(). */
export function medianBy<T>(items: readonly T[], key: (item: T) => number): T {
  if (items.length === 0) throw new Error("no items to take the median of");
  const sorted = [...items].sort((a, b) => key(a) - key(b));
  return sorted[rankIndex(sorted.length, 50)] as T;
}

/** The arithmetic mean; NaN when there are no values. */
export function mean(values: readonly number[]): number {
  let sum = 0;
  for (const x of values) sum += x;
  return values.length === 0 ? NaN : sum / values.length;
}
