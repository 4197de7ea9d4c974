/**
 * Upper bounds, in seconds, of the latency histograms (time to first token, request duration):
 * from a cached prompt's first token on an idle GPU (milliseconds) to a long generation (a minute);
 * anything longer lands in +Inf.
 */
export const LATENCY_BUCKETS_S: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60];

/** A histogram as Prometheus reads it: per bound, how many observations were at most it (cumulative). */
export interface HistogramSnapshot {
  bounds: readonly number[];
  /** cumulative[i]: observations ≤ bounds[i]; the +Inf bucket is `count`. */
  cumulative: number[];
  sum: number;
  count: number;
}

/** Fixed buckets, counted per bucket as observations come (a few numbers, no allocation), summed up only when read. */
export class Histogram {
  readonly bounds: readonly number[];
  /** Per bucket, not cumulative; the last one is past every bound. */
  private readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(bounds: readonly number[] = LATENCY_BUCKETS_S) {
    this.bounds = bounds;
    this.counts = new Float64Array(bounds.length + 1);
  }

  /** One observation; a negative or non-finite one (a clock that went backwards) is not counted. */
  observe(value: number): void {
    if (!(value >= 0) || value === Infinity) return;
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > (b[i] as number)) i++;
    (this.counts[i] as number)++;
    this.sum += value;
    this.count++;
  }

  snapshot(): HistogramSnapshot {
    const cumulative: number[] = [];
    let running = 0;
    for (let i = 0; i < this.bounds.length; i++) cumulative.push((running += this.counts[i] as number));
    return { bounds: this.bounds, cumulative, sum: this.sum, count: this.count };
  }
}
