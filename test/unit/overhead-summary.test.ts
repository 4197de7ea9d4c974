import { describe, expect, it } from "vitest";
import { evaluate } from "../../bench/overhead/checks.ts";
import type { Measurement, Scenario } from "../../bench/overhead/measure.ts";
import { summarise, toRun, type Figures } from "../../bench/overhead/summary.ts";
import { measurement } from "../support/overhead-measurements.ts";

const ST1_20: Scenario = { mode: "stream", concurrency: 1, chunks: 20 };

function repeat(label: string, n: number, rps: number, ttft: number, full = 2): Measurement {
  return measurement(label, ST1_20, { rps, latency: { p50: full, p95: full, p99: full }, ttft: { p50: ttft, p95: ttft }, repeat: n });
}

describe("bench:overhead's figures over repeats", () => {
  // The review's three repeats: the median req/s is repeat 2's, whose TTFT (1.6 ms) is the slowest.
  const kvgate = [repeat("kvgate", 1, 500, 1.0, 2.0), repeat("kvgate", 2, 510, 1.6, 3.5), repeat("kvgate", 3, 520, 1.1, 2.2)];
  const floor = [repeat("floor", 1, 900, 0.5), repeat("floor", 2, 700, 0.55), repeat("floor", 3, 800, 0.6)];
  const s = summarise([...kvgate, ...floor]);
  const of = (label: string) => s.medians.find((m) => m.label === label);

  it("are each the median over the repeats of that figure, not the median-req/s repeat's", () => {
    expect(of("kvgate")).toMatchObject({ rps: 510, ttft: { p50: 1.1, p95: 1.1 }, latency: { p50: 2.2 } });
    expect(of("floor")).toMatchObject({ rps: 800, ttft: { p50: 0.55 } });
  });

  it("make a TTFT target the median TTFT's: both sides medians of the same run", () => {
    const added = evaluate(s.medians).find((c) => c.what.startsWith("TTFT added over the floor"));
    // 1.1 − 0.55; from the median-req/s repeats it was 1.6 − 0.6 = 1.0.
    expect(added?.value).toBe(0.55);
  });

  it("keep each repeat's figures beside the medians, and write the medians as runs", () => {
    expect(s.perRepeat["kvgate stream/c1/20ch"]).toEqual({ rps: [500, 510, 520], latency_ms: { p50: [2, 3.5, 2.2], p95: [2, 3.5, 2.2], p99: [2, 3.5, 2.2] }, ttft_ms: { p50: [1, 1.6, 1.1], p95: [1, 1.6, 1.1] } });
    expect(toRun(of("kvgate") as Figures)).toMatchObject({ rps: 510, ttft_ms: { p50: 1.1, p95: 1.1 }, latency_ms: { p50: 2.2 } });
  });
});
