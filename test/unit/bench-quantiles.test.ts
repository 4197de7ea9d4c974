import { describe, expect, it } from "vitest";
import { ascending, boundedPercentile, censoredPercentiles, median, medianBy, percentile, percentiles } from "../../bench/stats/quantiles.ts";
import { round } from "../../bench/stats/round.ts";

describe("the benchmarks' percentile (nearest rank)", () => {
  it("is sorted[ceil(p / 100 × n) − 1]: always a measured value", () => {
    const hundred = ascending(Array.from({ length: 100 }, (_, i) => 100 - i));
    expect(percentile(hundred, 50)).toBe(50);
    expect(percentile(hundred, 95)).toBe(95);
    expect(percentile(hundred, 99)).toBe(99);
    expect(percentile(hundred, 100)).toBe(100);
    expect(percentile(hundred, 0.5)).toBe(1);
    expect(percentile([10, 20, 30, 40], 25)).toBe(10);
    expect(percentile([10, 20, 30, 40], 26)).toBe(20);
  });

  it("is null with no values, the value itself with one", () => {
    expect(percentile([], 50)).toBeNull();
    expect(percentiles([])).toEqual({ p50: null, p95: null, p99: null });
    expect(median([])).toBeNull();
    expect(percentile([7], 1)).toBe(7);
    expect(percentile([7], 99)).toBe(7);
    expect(percentiles([7])).toEqual({ p50: 7, p95: 7, p99: 7 });
    expect(median([7])).toBe(7);
  });

  it("gives a tied value wherever the rank falls among the ties", () => {
    const ties = [1, 5, 5, 5, 5, 9];
    expect(percentile(ties, 20)).toBe(5);
    expect(percentile(ties, 50)).toBe(5);
    expect(percentile(ties, 66)).toBe(5);
    expect(percentile(ties, 67)).toBe(5);
    expect(percentile(ties, 84)).toBe(9);
    expect(median([3, 3])).toBe(3);
  });

  it("refuses a rank outside (0, 100] and values that are not ascending", () => {
    expect(() => percentile([1], 0)).toThrow(RangeError);
    expect(() => percentile([1], 101)).toThrow(RangeError);
    expect(() => percentile([], Number.NaN)).toThrow(RangeError);
    expect(() => percentile([3, 1, 2], 50)).toThrow(/ascending/);
  });

  it("sorts for itself in percentiles() and median(), leaving the caller's array alone", () => {
    const values = [30, 10, 20];
    expect(percentiles(values)).toEqual({ p50: 20, p95: 30, p99: 30 });
    expect(median(values)).toBe(20);
    expect(values).toEqual([30, 10, 20]);
  });
});

describe("the benchmarks' median", () => {
  it("is the middle value, the lower middle for an even count (not the mean of the two)", () => {
    expect(median([1, 2, 3])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2);
    expect(median([100, 101, 103, 140])).toBe(101);
  });

  it("picks the repeat whose key is the median, by the same rule", () => {
    const runs = [
      { name: "a", rps: 300 },
      { name: "b", rps: 100 },
      { name: "c", rps: 400 },
      { name: "d", rps: 200 },
    ];
    expect(medianBy(runs, (r) => r.rps).name).toBe("d");
    expect(medianBy(runs.slice(0, 3), (r) => r.rps).name).toBe("a");
    expect(medianBy(runs.slice(2, 3), (r) => r.rps).name).toBe("c");
    expect(() => medianBy([], (r: { rps: number }) => r.rps)).toThrow(/no items/);
  });
});

describe("a report's rounding", () => {
  it("keeps two decimals below 10 and one from 10 on; null and non-finite are null", () => {
    expect(round(1.2345)).toBe(1.23);
    expect(round(12.345)).toBe(12.3);
    expect(round(-3.456)).toBe(-3.46);
    expect(round(null)).toBeNull();
    expect(round(Number.POSITIVE_INFINITY)).toBeNull();
  });
});

describe("the benchmarks' percentile of figures some of which are lower bounds", () => {
  const m = (value: number) => ({ value, atLeast: false });
  const b = (value: number) => ({ value, atLeast: true });

  it("is exact while every bound ranks above it, a lower bound once one ranks at or below it", () => {
    const figures = [b(60), m(1), m(2), m(3), b(60)];
    expect(boundedPercentile(figures, 40)).toEqual({ value: 2, atLeast: false });
    expect(boundedPercentile(figures, 60)).toEqual({ value: 3, atLeast: false });
    expect(boundedPercentile(figures, 80)).toEqual({ value: 60, atLeast: true });
    // A bound below a measured figure can still lift that rank: the result is a lower bound.
    expect(boundedPercentile([m(1), b(2), m(3)], 100)).toEqual({ value: 3, atLeast: true });
    // Of equal values, the measured one ranks first.
    expect(boundedPercentile([b(5), m(5)], 50)).toEqual({ value: 5, atLeast: false });
    expect(boundedPercentile([], 50)).toBeNull();
  });

  it("gives censored values their bound and names the percentiles that are lower bounds; none censored, percentiles() as it was", () => {
    expect(censoredPercentiles([3, 1, 2], [])).toEqual(percentiles([3, 1, 2]));
    expect(censoredPercentiles(Array.from({ length: 98 }, (_, i) => i + 1), [500, 500])).toEqual({ p50: 50, p95: 95, p99: 500, censored: 2, at_least: ["p99"] });
    expect(censoredPercentiles([], [500])).toEqual({ p50: 500, p95: 500, p99: 500, censored: 1, at_least: ["p50", "p95", "p99"] });
  });
});
