/**
 * The benchmarks' one definition of a percentile and a median.
 *
 * Nearest rank, never interpolated: the p-th percentile of n ascending values is
 * sorted[ceil(p / 100 × n) − 1], the smallest value with at least p% of the values at or below
 * it. A figure is then always a value that was measured (a p99 of 100 samples is the 99th
 * smallest), and the median is the 50th percentile by the same rule: the middle value for an odd
 * count, the lower of the two middle ones for an even count. A figure known only to be at least
 * some bound (a request that timed out before its first token) ranks by its bound, and a
 * percentile that such a bound can lift is marked as a lower bound (boundedPercentile).
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

export type PercentileName = "p50" | "p95" | "p99";
const PERCENTILE_RANKS: readonly (readonly [PercentileName, number])[] = [
  ["p50", 50],
  ["p95", 95],
  ["p99", 99],
];

/** A figure that was measured, or (atLeast) is known only to be at least `value`: a censored one. */
export interface Bounded {
  value: number;
  atLeast: boolean;
}

/**
 * The p-th percentile, by the rule above, of figures some of which are lower bounds: sorted by
 * value, a measured figure before a bound of the same value, so a bound ranks above every measured
 * figure below it. The result is a lower bound itself when a bound ranks at or below it: that
 * figure's true value may lie higher and lift the percentile with it. A bound ranked above it
 * cannot move it (its true value lies higher still). null when there are no figures.
 */
export function boundedPercentile(figures: readonly Bounded[], p: number): Bounded | null {
  const index = rankIndex(figures.length, p);
  if (figures.length === 0) return null;
  const sorted = [...figures].sort((a, b) => a.value - b.value || Number(a.atLeast) - Number(b.atLeast));
  return { value: (sorted[index] as Bounded).value, atLeast: sorted.slice(0, index + 1).some((f) => f.atLeast) };
}

/** Percentiles of measured values with censored ones among them (censoredPercentiles). */
/** boundedRatioMark's marks in words, for the reports that show them. */
export const RATIO_MARKS = "A ratio marked ≥ has lower bounds in its numerator, so the true ratio is at least it, ≤ in its denominator, at most it, and ? on both sides, either.";

/**
 * Where a ratio's truth lies when lower bounds are in it: "≥" with one in the numerator (the true
 * ratio is at least this), "≤" with one in the denominator, "?" with them on both sides (either way).
 */
export function boundedRatioMark(numeratorAtLeast: boolean, denominatorAtLeast: boolean): "" | "≥ " | "≤ " | "? " {
  if (numeratorAtLeast) return denominatorAtLeast ? "? " : "≥ ";
  return denominatorAtLeast ? "≤ " : "";
}

export interface CensoredPercentiles extends Percentiles {
  /** Values known only to be at least a bound (for TTFT: requests that timed out before their first token). Absent when there were none. */
  censored?: number;
  /** Those of p50, p95 and p99 that are only lower bounds, "≥" the figure given (a censored value ranks at or below them). Absent when none is. */
  at_least?: PercentileName[];
}

/**
 * p50, p95 and p99 of `measured` values and of censored ones, each given by its lower bound
 * (boundedPercentile's ranking); without censored values, exactly percentiles(measured).
 */
export function censoredPercentiles(measured: readonly number[], bounds: readonly number[]): CensoredPercentiles {
  if (bounds.length === 0) return percentiles(measured);
  const figures: Bounded[] = [...measured.map((value) => ({ value, atLeast: false })), ...bounds.map((value) => ({ value, atLeast: true }))];
  const out: CensoredPercentiles = { p50: null, p95: null, p99: null, censored: bounds.length };
  const atLeast: PercentileName[] = [];
  for (const [name, p] of PERCENTILE_RANKS) {
    const f = boundedPercentile(figures, p);
    out[name] = f?.value ?? null;
    if (f?.atLeast) atLeast.push(name);
  }
  if (atLeast.length > 0) out.at_least = atLeast;
  return out;
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
