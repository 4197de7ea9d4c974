import { describe, expect, it } from "vitest";
import type { Measurement } from "../../bench/overhead/measure.ts";
import { cpuSplits, summarise, toRun } from "../../bench/overhead/summary.ts";
import { measurement } from "../support/overhead-measurements.ts";

const NS50 = { mode: "nonstream", concurrency: 50, chunks: null } as const;

function run(label: string, repeat: number, main: number, objects: number | null = null, rps = 1000): Measurement {
  return measurement(label, NS50, { rps, processCpuUs: { main, objects }, repeat });
}

describe("bench:overhead's CPU split between the Worker and its routing object", () => {
  // kvgate's one process and its apart twin's objects, three repeats. Paired by repeat the
  // Worker's side is 600 − 300, 700 − 100, 900 − 200: 300, 600, 700, median 600; from the medians
  // alone it would be 700 − 200 = 500.
  const all = [
    run("kvgate", 1, 600, null),
    run("kvgate", 2, 700, null),
    run("kvgate", 3, 900, null),
    run("kvgate-apart", 1, 800, 300),
    run("kvgate-apart", 2, 820, 100),
    run("kvgate-apart", 3, 840, 200),
    run("floor", 1, 300),
    run("kvgate-nolog", 1, 650),
  ];

  it("splits a target by its apart twin's object process, paired by repeat", () => {
    const split = cpuSplits(all).get("kvgate nonstream/c50");
    expect(split).toEqual({ worker: 600, object: 200 });
  });

  it("keeps each repeat's CPU of each process in figures_per_repeat, so the split and the CPU target can be checked from the file", () => {
    const repeats = summarise(all).perRepeat;
    expect(repeats["kvgate nonstream/c50"]?.cpu_us).toEqual({ main: [600, 700, 900], objects: [null, null, null] });
    expect(repeats["kvgate-apart nonstream/c50"]?.cpu_us).toEqual({ main: [800, 820, 840], objects: [300, 100, 200] });
  });

  it("reports an apart twin's processes as measured, the floor's CPU as all the Worker's, and no split where none was measured", () => {
    const s = cpuSplits(all);
    expect(s.get("kvgate-apart nonstream/c50")).toEqual({ worker: 820, object: 200 });
    expect(s.get("floor nonstream/c50")).toEqual({ worker: 300, object: 0 });
    expect(s.has("kvgate-nolog nonstream/c50")).toBe(false);
  });

  it("puts the split on the run as cpu_us_per_request, and nothing on a run without one", () => {
    const summary = summarise(all);
    const kv = summary.medians.find((m) => m.label === "kvgate") as Measurement;
    expect(toRun(kv, summary.cpuSplits.get("kvgate nonstream/c50")).cpu_us_per_request).toEqual({ worker: 600, object: 200 });
    const nolog = summary.medians.find((m) => m.label === "kvgate-nolog") as Measurement;
    expect(toRun(nolog, summary.cpuSplits.get("kvgate-nolog nonstream/c50"))).not.toHaveProperty("cpu_us_per_request");
    // A twin's total is both of its processes.
    expect(summary.cpuTotals.get("kvgate-apart nonstream/c50")).toBe(1040);
  });
});
