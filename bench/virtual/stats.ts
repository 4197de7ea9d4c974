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
  const bySeed = groupBySeed(runs, figure);
  return mean([...bySeed.values()].map(mean));
}

/**
 * `a`'s pooled figure over `b`'s, and how far chance in the jitter draws could move it: the
 * bootstrap resamples, within each seed of the trace, each router's jitter draws with
 * replacement (the routers' draws are independent: another router takes another path).
 * Seeded, so a report renders the same interval every time.
 */
export function ratioWithInterval(a: readonly VirtualRun[], b: readonly VirtualRun[], figure: (r: VirtualRun) => number | null): Ratio {
  const sa = [...groupBySeed(a, figure).entries()].sort(([x], [y]) => x - y);
  const sb = groupBySeed(b, figure);
  const pairs = sa.filter(([seed]) => sb.has(seed)).map(([seed, xs]) => [xs, sb.get(seed) as number[]] as const);
  if (pairs.length === 0) return { ratio: NaN, low: NaN, high: NaN };
  const ratioOf = (pick: (xs: readonly number[]) => number) => mean(pairs.map(([xs]) => pick(xs))) / mean(pairs.map(([, ys]) => pick(ys)));
  const rand = mulberry32(0xb007).next;
  const resample = (xs: readonly number[]) => mean(Array.from(xs, () => xs[Math.floor(rand() * xs.length)] as number));
  const draws: number[] = [];
  for (let k = 0; k < RESAMPLES; k++) {
    const ma = mean(pairs.map(([xs]) => resample(xs)));
    const mb = mean(pairs.map(([, ys]) => resample(ys)));
    draws.push(ma / mb);
  }
  draws.sort((x, y) => x - y);
  return { ratio: ratioOf(mean), low: draws[Math.floor(0.025 * RESAMPLES)] as number, high: draws[Math.ceil(0.975 * RESAMPLES) - 1] as number };
}

function groupBySeed(runs: readonly VirtualRun[], figure: (r: VirtualRun) => number | null): Map<number, number[]> {
  const out = new Map<number, number[]>();
  for (const r of runs) {
    const v = figure(r);
    if (v === null || !Number.isFinite(v)) continue;
    const list = out.get(r.seed);
    if (list) list.push(v);
    else out.set(r.seed, [v]);
  }
  return out;
}
