import { mean } from "../stats/quantiles.ts";
import { mulberry32 } from "../traces/prng.ts";
import type { VirtualRun } from "./point.ts";

/** Resamples of each bootstrap interval: enough for its 2.5th and 97.5th percentiles to settle to the third digit. */
const RESAMPLES = 2000;

/** A ratio of two routers' figures, with the 95% interval of its bootstrap. */
export interface Ratio {
  ratio: number;
  low: number;
  high: number;
}

/**
 * One router's figure over the traffic: each seed of the trace (a Mooncake slice) weighs the same,
 * its figure the mean over that seed's jitter draws. `runs` are one router's.
 */
export function pooled(runs: readonly VirtualRun[], figure: (r: VirtualRun) => number | null): number {
  return mean([...byDraw(runs, figure).values()].map((draws) => mean([...draws.values()])));
}

/**
 * What a ratio's interval takes as chance. `draws`: the hops and the router's draws, the seeds held
 * as they are — what another run of the same slices could give. `seeds`: the seeds themselves as a
 * sample of the trace's traffic (a Mooncake slice of its hour) — what other slices could give. On
 * Mooncake the slices differ far more than the draws of one slice do (over shards, kv_hit ÷ one
 * object's: a draw's spread ~3% around its slice's mean, the slices' means ~5% apart), and a
 * verdict shown on 6 slices over the draws did not hold on 12.
 */
export type Chance = "draws" | "seeds";

/**
 * `a`'s pooled figure over `b`'s, and how far chance could move it. The routers' runs of one seed
 * and jitter seed share their draws (the same hops, the same router seed), so they are pairs.
 * Over the draws, the bootstrap resamples, within each seed of the trace, the jitter seeds both
 * routers ran, with replacement, and takes both routers' runs of each. Over the seeds, it
 * resamples the seeds with replacement, each with all its pairs of draws; fewer than two seeds
 * give no interval (NaN). Seeded, so a report renders the same interval every time.
 */
export function ratioWithInterval(a: readonly VirtualRun[], b: readonly VirtualRun[], figure: (r: VirtualRun) => number | null, over: Chance = "draws"): Ratio {
  const pa = byDraw(a, figure);
  const pb = byDraw(b, figure);
  // Per seed, the draws both have: [a's figure, b's figure] of each.
  const seeds: [number, number][][] = [];
  for (const [seed, draws] of [...pa.entries()].sort(([x], [y]) => x - y)) {
    const other = pb.get(seed);
    if (!other) continue;
    const pairs: [number, number][] = [];
    for (const [draw, x] of draws) {
      const y = other.get(draw);
      if (y !== undefined) pairs.push([x, y]);
    }
    if (pairs.length > 0) seeds.push(pairs);
  }
  if (seeds.length === 0) return { ratio: NaN, low: NaN, high: NaN };
  const ratioOf = (per: readonly (readonly [number, number])[][]) => mean(per.map((p) => mean(p.map(([x]) => x)))) / mean(per.map((p) => mean(p.map(([, y]) => y))));
  const ratio = ratioOf(seeds);
  if (over === "seeds" && seeds.length < 2) return { ratio, low: NaN, high: NaN };
  const rand = mulberry32(0xb007).next;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  const resample = over === "seeds" ? () => seeds.map(() => pick(seeds)) : () => seeds.map((p) => Array.from(p, () => pick(p)));
  const draws: number[] = [];
  for (let k = 0; k < RESAMPLES; k++) draws.push(ratioOf(resample()));
  draws.sort((x, y) => x - y);
  return { ratio, low: draws[Math.floor(0.025 * RESAMPLES)] as number, high: draws[Math.ceil(0.975 * RESAMPLES) - 1] as number };
}

/** Each seed's figure per jitter seed. */
function byDraw(runs: readonly VirtualRun[], figure: (r: VirtualRun) => number | null): Map<number, Map<number, number>> {
  const out = new Map<number, Map<number, number>>();
  for (const r of runs) {
    const v = figure(r);
    if (v === null || !Number.isFinite(v)) continue;
    let m = out.get(r.seed);
    if (!m) out.set(r.seed, (m = new Map()));
    m.set(r.jitter_seed, v);
  }
  return out;
}
