/**
 * From repeated measurements to reported figures: the median run per target and scenario, in the
 * exact shape of overhead.json's "runs", and a lookup for the ratios.
 */
import { scenarioKey, type Measurement, type Scenario } from "./measure.ts";
import { medianBy } from "../stats/quantiles.ts";
import type { TargetName } from "./targets.ts";

/** One element of overhead.json's "runs" — the schema issue 4 fixes; do not add fields here. */
export interface RunRecord {
  target: TargetName;
  mode: "nonstream" | "stream";
  concurrency: number;
  chunks: number | null;
  rps: number;
  latency_ms: { p50: number | null; p95: number | null; p99: number | null };
  ttft_ms: { p50: number | null; p95: number | null };
  errors: number;
  do_calls_per_request: number | null;
  /** LiteLLM only: its worker processes (it is run twice, with 1 and with one per core). */
  workers?: number;
}

export interface Summary {
  /** Median measurement per label and scenario, in measurement order. */
  medians: Measurement[];
  /** rps of every repeat, to show the spread behind each median. */
  repeatsRps: Record<string, number[]>;
  /** Errors over all repeats, where there were any. */
  errorsAllRepeats: Record<string, { errors: number; samples: string[] }>;
}

export const keyOf = (label: string, s: Scenario): string => `${label} ${scenarioKey(s)}`;

export function summarise(all: Measurement[]): Summary {
  const groups = new Map<string, Measurement[]>();
  for (const m of all) {
    const k = keyOf(m.label, m);
    const list = groups.get(k);
    if (list) list.push(m);
    else groups.set(k, [m]);
  }
  const medians: Measurement[] = [];
  const repeatsRps: Record<string, number[]> = {};
  const errorsAllRepeats: Record<string, { errors: number; samples: string[] }> = {};
  for (const [k, list] of groups) {
    medians.push(medianBy(list, (m) => m.rps));
    repeatsRps[k] = list.map((m) => m.rps);
    const errors = list.reduce((n, m) => n + m.errors, 0);
    if (errors > 0) errorsAllRepeats[k] = { errors, samples: [...new Set(list.flatMap((m) => m.errorSamples))].slice(0, 5) };
  }
  return { medians, repeatsRps, errorsAllRepeats };
}

export function toRun(m: Measurement): RunRecord {
  return {
    target: m.target,
    mode: m.mode,
    concurrency: m.concurrency,
    chunks: m.chunks,
    rps: m.rps,
    latency_ms: { p50: m.latency.p50, p95: m.latency.p95, p99: m.latency.p99 },
    ttft_ms: { p50: m.ttft.p50, p95: m.ttft.p95 },
    errors: m.errors,
    do_calls_per_request: m.doCallsPerRequest,
    ...(m.workers === undefined ? {} : { workers: m.workers }),
  };
}

/** The median measurement of `label` in scenario `s`, if it was measured. */
export function find(medians: readonly Measurement[], label: string, s: Scenario): Measurement | undefined {
  return medians.find((m) => m.label === label && m.mode === s.mode && m.concurrency === s.concurrency && m.chunks === s.chunks);
}
