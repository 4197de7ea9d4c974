/**
 * One measurement: a scenario (mode, concurrency, stream length) against one target, with the
 * Durable Object's call counters read before and after, reduced to the figures the report keeps.
 * They are kept unrounded: the checks judge them as measured (checks.ts), and only what is written
 * is rounded (summary.ts's toRun, report-md.ts).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { runCompletionsLoad } from "./completions-load.ts";
import { ascending, percentile } from "../stats/quantiles.ts";
import { cpuSince } from "../harness/process-cpu.ts";
import { doCalls, type Target, type TargetName } from "./targets.ts";

export interface Scenario {
  mode: "nonstream" | "stream";
  concurrency: number;
  /** Content events per stream (max_tokens); null for non-streaming. */
  chunks: number | null;
}

export const SCENARIOS: Scenario[] = [
  { mode: "nonstream", concurrency: 1, chunks: null },
  { mode: "nonstream", concurrency: 50, chunks: null },
  { mode: "stream", concurrency: 1, chunks: 20 },
  { mode: "stream", concurrency: 1, chunks: 100 },
  { mode: "stream", concurrency: 50, chunks: 20 },
  { mode: "stream", concurrency: 50, chunks: 100 },
];

export function scenarioKey(s: Scenario): string {
  return `${s.mode}/c${s.concurrency}${s.chunks === null ? "" : `/${s.chunks}ch`}`;
}

export interface Distribution {
  p50: number | null;
  p95: number | null;
  p99: number | null;
}

export interface Measurement extends Scenario {
  target: TargetName;
  label: string;
  workers: number | undefined;
  rps: number;
  completed: number;
  latency: Distribution;
  ttft: { p50: number | null; p95: number | null };
  errors: number;
  errorSamples: string[];
  doCallsPerRequest: number | null;
  /** x-kvgate-overhead-ms as the responses reported it. */
  overheadHeader: Distribution | null;
  /**
   * workerd CPU per completed request, in µs: `main` the process serving the Worker (and its
   * Durable Objects, unless they are apart), `objects` the objects' own process when apart.
   * null for a target not on workerd.
   */
  processCpuUs: { main: number; objects: number | null } | null;
  /** Which repeat this is (1-based): the CPU split pairs a target with its apart twin by repeat. */
  repeat: number;
}

function distribution(values: number[]): Distribution {
  const s = ascending(values);
  return { p50: percentile(s, 50), p95: percentile(s, 95), p99: percentile(s, 99) };
}

/** A finished lease waits up to releaseFlushMs (10 ms) for a route call before it flushes itself. */
const FLUSH_WAIT_MS = 100;
const MAX_REQUESTS = 500_000;

export async function measure(target: Target, s: Scenario, durationMs: number, repeat = 0): Promise<Measurement> {
  const before = await doCalls(target);
  const mainCpu = target.pid === undefined ? null : cpuSince(target.pid);
  const objectsCpu = target.pids ? cpuSince(target.pids.object) : null;
  const r = await runCompletionsLoad({ url: target.url, headers: target.headers, model: target.model, chunks: s.chunks, connections: s.concurrency, durationMs, maxRequests: MAX_REQUESTS });
  const perRequest = (ms: number): number => (ms * 1000) / Math.max(1, r.completed);
  const processCpuUs = mainCpu === null ? null : { main: perRequest(mainCpu()), objects: objectsCpu === null ? null : perRequest(objectsCpu()) };
  let callsPerRequest: number | null = null;
  if (before !== null) {
    await sleep(FLUSH_WAIT_MS);
    const after = (await doCalls(target)) as number;
    const requests = r.completed + r.errors;
    callsPerRequest = requests > 0 ? (after - before) / requests : null;
  }
  const ttft = ascending(r.ttftMs);
  return {
    ...s,
    target: target.name,
    label: target.label,
    workers: target.workers,
    rps: r.elapsedMs > 0 ? (r.completed * 1000) / r.elapsedMs : 0,
    completed: r.completed,
    latency: distribution(r.latenciesMs),
    ttft: s.mode === "stream" ? { p50: percentile(ttft, 50), p95: percentile(ttft, 95) } : { p50: null, p95: null },
    errors: r.errors,
    errorSamples: r.errorSamples,
    doCallsPerRequest: callsPerRequest,
    overheadHeader: r.overheadMs.length > 0 ? distribution(r.overheadMs) : null,
    processCpuUs,
    repeat,
  };
}

/** Untimed traffic first: JIT, connection pools, the isolate and the Durable Object warm up. */
export async function warmUp(target: Target, durationMs: number): Promise<void> {
  await measure(target, { mode: "nonstream", concurrency: 50, chunks: null }, durationMs);
  await measure(target, { mode: "stream", concurrency: 50, chunks: 20 }, durationMs / 2);
}
