/**
 * A count over the last 60 seconds, in one-second buckets: what a per-minute limit compares with.
 * It answers to the second (a bucket leaves the window whole), and costs 60 numbers whatever the
 * rate.
 */
const BUCKETS = 60;
/** The window's length: a per-minute limit reached lifts within it. */
export const WINDOW_MS = BUCKETS * 1000;

export class MinuteWindow {
  private readonly counts = new Float64Array(BUCKETS);
  /** The second (epoch s) each bucket counts; a bucket of an older second is empty. */
  private readonly seconds = new Float64Array(BUCKETS).fill(-1);

  add(now: number, amount: number): void {
    const s = Math.floor(now / 1000);
    const i = s % BUCKETS;
    if (this.seconds[i] !== s) {
      this.seconds[i] = s;
      this.counts[i] = 0;
    }
    (this.counts as Float64Array)[i] = (this.counts[i] as number) + amount;
  }

  /** The sum over the 60 seconds up to `now`. */
  total(now: number): number {
    const s = Math.floor(now / 1000);
    let sum = 0;
    for (let i = 0; i < BUCKETS; i++) if ((this.seconds[i] as number) > s - BUCKETS) sum += this.counts[i] as number;
    return sum;
  }

  /** Milliseconds until the window's total falls below `limit` with nothing added: when a refused caller may try again. */
  msUntilBelow(limit: number, now: number): number {
    const s = Math.floor(now / 1000);
    let total = this.total(now);
    // Oldest second first: each leaves the window when the minute after it has passed.
    for (let age = BUCKETS - 1; age >= 0 && total >= limit; age--) {
      const second = s - age;
      const i = ((second % BUCKETS) + BUCKETS) % BUCKETS;
      if (this.seconds[i] !== second) continue;
      total -= this.counts[i] as number;
      if (total < limit) return (second + BUCKETS) * 1000 - now;
    }
    return total < limit ? 0 : BUCKETS * 1000;
  }

  empty(now: number): boolean {
    return this.total(now) === 0;
  }
}
