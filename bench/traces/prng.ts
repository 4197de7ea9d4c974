/**
 * A small seeded PRNG (mulberry32) and the draws traces need. Each session gets its own stream,
 * derived from (seed, purpose, index), so a trace with more sessions keeps the first ones
 * unchanged: a "pressured" variant differs only where it asks to.
 */

export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
  /** Integer in [min, max], both included. */
  int(min: number, max: number): number;
  pick<T>(items: readonly T[]): T;
  chance(p: number): boolean;
  /** 8 lowercase hex digits. */
  hex(): string;
}

export function mulberry32(seed: number): Rng {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick<T>(items: readonly T[]): T {
      const item = items[Math.floor(next() * items.length)];
      if (item === undefined) throw new RangeError("pick from an empty list");
      return item;
    },
    chance: (p) => next() < p,
    hex: () => Math.floor(next() * 4294967296).toString(16).padStart(8, "0"),
  };
}

/** A stream for one purpose ("system", "session") and index, independent of every other stream. */
export function streamFor(seed: number, purpose: string, index = 0): Rng {
  let h = Math.imul((seed >>> 0) ^ 0x9e3779b9, 0x85ebca6b);
  for (let i = 0; i < purpose.length; i++) h = Math.imul(h ^ purpose.charCodeAt(i), 0x01000193);
  h = Math.imul(h ^ index, 0xc2b2ae35);
  return mulberry32(h ^ (h >>> 16));
}

/**
 * Sampler of ranks 0..n-1 with P(rank k) ∝ 1 / (k + 1)^exponent: a few popular items and a long
 * tail, the popularity shape of documents in a retrieval workload.
 */
export function zipfSampler(n: number, exponent: number): (rng: Rng) => number {
  const cumulative: number[] = [];
  let total = 0;
  for (let k = 0; k < n; k++) {
    total += 1 / Math.pow(k + 1, exponent);
    cumulative.push(total);
  }
  return (rng) => {
    const u = rng.next() * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((cumulative[mid] ?? total) > u) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
}

/** 0..n-1 in a seeded random order (Fisher–Yates). */
export function shuffled(rng: Rng, n: number): number[] {
  const items = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = rng.int(0, i);
    [items[i], items[j]] = [items[j] ?? j, items[i] ?? i];
  }
  return items;
}
