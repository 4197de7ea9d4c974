import type { Measurement, Scenario } from "../../bench/overhead/measure.ts";

/** A bench:overhead measurement of `label` in scenario `s`: 1,000 req/s, 1 ms latency, no TTFT or CPU, repeat 1, unless `over` says otherwise. */
export function measurement(label: string, s: Scenario, over: Partial<Measurement> = {}): Measurement {
  return {
    ...s,
    target: label as Measurement["target"],
    label,
    workers: undefined,
    rps: 1000,
    completed: 1,
    latency: { p50: 1, p95: 1, p99: 1 },
    ttft: { p50: null, p95: null },
    errors: 0,
    errorSamples: [],
    doCallsPerRequest: null,
    overheadHeader: null,
    processCpuUs: null,
    repeat: 1,
    ...over,
  };
}
