import { describe, expect, it } from "vitest";
import { atSpeed, poissonArrivals, stagedPoissonArrivals } from "../../bench/traces/index.ts";

const gaps = (times: readonly number[]): number[] => times.map((t, i) => t - (times[i - 1] ?? 0));

describe("arrival schedules", () => {
  it("replays a trace's times at a speed factor", () => {
    expect(atSpeed([0, 1000, 1500, 4000], 2)).toEqual([0, 500, 750, 2000]);
    expect(atSpeed([0, 1000], 0.5)).toEqual([0, 2000]);
    expect(() => atSpeed([0], 0)).toThrow(RangeError);
    expect(() => atSpeed([0], Number.NaN)).toThrow(RangeError);
  });

  it("draws Poisson arrivals at the asked rate: the same for a seed, other for another", () => {
    const times = poissonArrivals(20_000, 5, 7);
    expect(poissonArrivals(20_000, 5, 7)).toEqual(times);
    expect(poissonArrivals(100, 5, 8)).not.toEqual(times.slice(0, 100));
    expect(gaps(times).every((g) => g > 0)).toBe(true);
    // 20,000 exponential gaps of mean 200 ms: the mean is within 2% (its standard error is 0.7%).
    const meanGap = (times.at(-1) ?? 0) / times.length;
    expect(meanGap).toBeGreaterThan(196);
    expect(meanGap).toBeLessThan(204);
    // Exponential, not evenly spaced: about e^-1 of the gaps exceed the mean.
    const longer = gaps(times).filter((g) => g > 200).length / times.length;
    expect(longer).toBeGreaterThan(0.35);
    expect(longer).toBeLessThan(0.39);
  });

  it("steps the rate through stages, each restarting at its own start", () => {
    const stages = [
      { ratePerSec: 10, durationS: 100 },
      { ratePerSec: 40, durationS: 100 },
    ];
    const times = stagedPoissonArrivals(stages, 3);
    const first = times.filter((t) => t < 100_000).length;
    const second = times.length - first;
    // Poisson counts of mean 1,000 and 4,000: within 4 standard deviations.
    expect(Math.abs(first - 1000)).toBeLessThan(4 * Math.sqrt(1000));
    expect(Math.abs(second - 4000)).toBeLessThan(4 * Math.sqrt(4000));
    expect(times.at(-1)).toBeLessThan(200_000);
    expect(gaps(times).every((g) => g >= 0)).toBe(true);
    expect(() => stagedPoissonArrivals([{ ratePerSec: 0, durationS: 1 }], 1)).toThrow(RangeError);
  });
});
