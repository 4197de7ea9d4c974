/**
 * Worker-level failure knobs, for benchmarks of retries, failover and breakers. They apply to
 * the workers `faultWorker` selects; the rest of the fleet stays healthy.
 */
export interface FaultKnobs {
  /** Fraction of inference requests answered 500 (0–1). */
  errorRate: number;
  /** Fraction of inference requests that stall: stop sending mid-stream without closing (0–1). */
  stallRate: number;
  /** Content events a stalling stream sends before it stops. */
  stallAfterChunks: number;
  /** The worker dies (closes its port and every connection) after this many inference requests; 0 = never. */
  dieAfterRequests: number;
  /** Multiplies every latency (2 = half speed). */
  slowFactor: number;
}

export const HEALTHY: Readonly<FaultKnobs> = {
  errorRate: 0,
  stallRate: 0,
  stallAfterChunks: 1,
  dieAfterRequests: 0,
  slowFactor: 1,
};

/**
 * Seeded random draws (mulberry32), so a benchmark with an error rate fails the same requests on
 * every run with the same seed.
 */
export class FaultDice {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** True with probability p; draws nothing when p is 0 or 1. */
  chance(p: number): boolean {
    if (p <= 0) return false;
    if (p >= 1) return true;
    return this.next() < p;
  }

  private next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
}
