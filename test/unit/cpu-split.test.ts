import { describe, expect, it } from "vitest";
import { cpuSplit } from "../../bench/ceiling/cpu-split.ts";
import type { CeilingRun } from "../../bench/ceiling/key-cost.ts";

/** One repeat of the four targets the split reads: same-process totals, apart runs' two processes. */
function repeat(n: number, kvgate: number, kvgateObject: number, ceiling: number, toyObject: number): CeilingRun[] {
  return [
    { target: "kvgate", repeat: n, rps: 1000, cpu_us_per_request: kvgate, errors: 0 },
    { target: "kvgate-apart", repeat: n, rps: 800, cpu_us_per_request: 900 + kvgateObject, cpu_split_us_per_request: { worker: 900, object: kvgateObject }, errors: 0 },
    { target: "floor+body+route", repeat: n, rps: 2000, cpu_us_per_request: ceiling, errors: 0 },
    { target: "floor+body+route-apart", repeat: n, rps: 1000, cpu_us_per_request: 600 + toyObject, cpu_split_us_per_request: { worker: 600, object: toyObject }, errors: 0 },
  ];
}

describe("bench:ceiling's CPU split", () => {
  it("charges the object what its own process used and the Worker the rest of the same repeat's total", () => {
    const split = cpuSplit([...repeat(1, 1000, 200, 500, 100), ...repeat(2, 1200, 100, 700, 300)]);
    const kvgate = split.sides.find((s) => s.target === "kvgate");
    // Repeat 1: 1000 − 200 = 800; repeat 2: 1200 − 100 = 1100 (not 1200 − 200, nor a median of totals minus a median of objects).
    expect(kvgate?.worker_us).toMatchObject({ min: 800, max: 1100, repeats: 2 });
    expect(kvgate?.object_us).toMatchObject({ min: 100, max: 200 });
    expect(kvgate?.apart_rps_ratio.median).toBe(0.8);
    const v = split.versus_ceiling;
    expect(v?.rps_ratio.median).toBe(0.5);
    // Worker sides: 800 / 400 and 1100 / 400.
    expect(v?.worker_cpu_ratio).toMatchObject({ min: 2, max: 2.75 });
    // Object sides: 200 / 100 and 100 / 300.
    expect(v?.object_cpu_ratio).toMatchObject({ min: 0.33, max: 2 });
  });

  it("splits nothing without the apart runs, and still compares kvgate with the ceiling", () => {
    const runs = [...repeat(1, 1000, 200, 500, 100)].filter((r) => !r.target.endsWith("-apart"));
    const split = cpuSplit(runs);
    expect(split.sides).toEqual([]);
    expect(split.versus_ceiling?.cpu_ratio.median).toBe(2);
    expect(split.versus_ceiling?.worker_cpu_ratio).toBeNull();
  });
});
