import { streamFor, type Rng } from "./prng.ts";

/**
 * When the requests of an open-loop trace arrive, in ms from the start: the trace's own times at
 * a speed factor, or a seeded Poisson process (constant rate, or stepping through stages of
 * constant rate as llm-d's benchmarks ramp their load). Every list is non-decreasing.
 */

/** A stretch of constant arrival rate. */
export interface RateStage {
  ratePerSec: number;
  durationS: number;
}

/** The trace's times at `speed`: 2 replays twice as fast (arrival gaps halved), 0.5 half as fast. */
export function atSpeed(timesMs: readonly number[], speed: number): number[] {
  if (!(speed > 0 && Number.isFinite(speed))) throw new RangeError(`speed must be a positive number, got ${speed}`);
  return timesMs.map((t) => t / speed);
}

/** `count` arrivals of a Poisson process at `ratePerSec`: independent exponential gaps, the first one from 0. */
export function poissonArrivals(count: number, ratePerSec: number, seed: number): number[] {
  checkRate(ratePerSec);
  const rng = streamFor(seed, "arrivals");
  const times: number[] = [];
  let t = 0;
  for (let i = 0; i < count; i++) {
    t += exponentialGapMs(rng, ratePerSec);
    times.push(t);
  }
  return times;
}

/**
 * Poisson arrivals through each stage in turn, restarting at every stage's start (as
 * inference-perf's poisson load does): a stage of rate r and duration d brings about r × d
 * requests, Poisson-distributed.
 */
export function stagedPoissonArrivals(stages: readonly RateStage[], seed: number): number[] {
  const rng = streamFor(seed, "arrivals");
  const times: number[] = [];
  let start = 0;
  for (const { ratePerSec, durationS } of stages) {
    checkRate(ratePerSec);
    if (!(durationS > 0)) throw new RangeError(`a stage's duration must be positive, got ${durationS}`);
    const end = start + durationS * 1000;
    for (let t = start + exponentialGapMs(rng, ratePerSec); t < end; t += exponentialGapMs(rng, ratePerSec)) times.push(t);
    start = end;
  }
  return times;
}

function exponentialGapMs(rng: Rng, ratePerSec: number): number {
  return (-Math.log(1 - rng.next()) / ratePerSec) * 1000;
}

function checkRate(ratePerSec: number): void {
  if (!(ratePerSec > 0 && Number.isFinite(ratePerSec))) throw new RangeError(`rate must be a positive number per second, got ${ratePerSec}`);
}
