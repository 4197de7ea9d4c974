/**
 * Worker-level failure knobs, for benchmarks of retries, failover and breakers. They apply to
 * the workers `faultWorker` selects (the rest of the fleet stays healthy), or to one worker each
 * through startFleet's `faults`. The time-based ones count from the fleet's fault clock, which
 * starts with the fleet unless startFleet is told to hold it.
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
  /**
   * Ms after the fault clock starts at which errorRate, stallRate and slowFactor take effect and
   * flapping begins; 0 = at once. Before it the worker is healthy, so a run can watch it turn.
   */
  onsetMs: number;
  /** Ms after the fault clock starts at which the worker dies (closes its port and every connection); 0 = never. */
  dieAtMs: number;
  /**
   * Flapping, as a crashed vLLM restarted by its supervisor looks: from onset, the port is closed
   * and every connection cut for flapDownMs (new connections are refused), then the worker serves
   * again, with an empty KV cache, for flapUpMs; flapCycles times (0 = no flapping). After the
   * last cycle it stays up.
   */
  flapDownMs: number;
  flapUpMs: number;
  flapCycles: number;
}

/** What happened to a worker, and when (Date.now()), for a benchmark's timeline. */
export interface FaultEvent {
  worker: number;
  /** onset: the rate and slow knobs took effect; down/up: a flap; dead: dieAtMs or dieAfterRequests. */
  kind: "onset" | "down" | "up" | "dead";
  at: number;
}

export const HEALTHY: Readonly<FaultKnobs> = {
  errorRate: 0,
  stallRate: 0,
  stallAfterChunks: 1,
  dieAfterRequests: 0,
  slowFactor: 1,
  onsetMs: 0,
  dieAtMs: 0,
  flapDownMs: 0,
  flapUpMs: 0,
  flapCycles: 0,
};

/** HEALTHY has every knob, so it is the list of their names too. */
export function isFaultKnob(name: string): name is keyof FaultKnobs {
  return Object.hasOwn(HEALTHY, name);
}

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
