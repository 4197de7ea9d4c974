import type { GpuProfile } from "../fleet/presets.ts";
import { BLOCK_TOKENS } from "../fleet/presets.ts";
import { prefixCeiling } from "./prefix-ceiling.ts";
import type { TimedTrace } from "./timed.ts";

/**
 * How busy an open-loop trace keeps a simulated fleet, from the simulator's own cost model
 * (bench/fleet/cost-model.ts), and the speed factor or Poisson rate that puts it at a target load.
 *
 * The fleet's capacity is its throughput when saturated: every worker runs as many sequences as
 * its KV blocks or its seat limit allow (N), and every step spends its token budget B: N decode
 * tokens and B − N prefill tokens (a "mixed" step), or N decode tokens alone once no prompt waits.
 *   mixed step   = prefillBaseMs + prefillMsPerToken × (B − N) + decode(N)
 *   decode(N)    = decodeStepMs × (1 + batchSlowdown × (N − 1))
 *   busy time    = P / (B − N) mixed steps + max(0, O − N × P / (B − N)) / N decode-only steps
 * for P prompt tokens to prefill and O output tokens in all. Load = busy time / (workers × the
 * trace's span / speed). A worker carrying fewer than N sequences decodes fewer tokens per step,
 * so below saturation it is busier than this says: a load figure is how close the offered work
 * comes to the fleet's maximum throughput, not the share of time its steps run.
 *
 * P is the prompt tokens the ideal cache (prefix-ceiling.ts) still misses: the best any router can
 * do. A router that reaches less of the ceiling prefills more, so the fleet is busier than the
 * target; `traceDemand(trace, "none")` gives the other bound, every prompt token prefilled.
 * Counted in the trace's tokens: the simulator's chat template adds a few per request (22 for a
 * Mooncake prompt), left out.
 */

export interface TraceDemand {
  requests: number;
  /** Prompt tokens to prefill. */
  prefillTokens: number;
  outputTokens: number;
  /** Mean KV blocks a running request pins: its prompt and output. */
  meanBlocks: number;
  /** First arrival to last, at speed 1; at least 1 ms. */
  spanMs: number;
}

export interface FleetShape {
  /** One worker's profile, latencies already multiplied by the fleet's timeScale (bench/fleet/options.ts profileOf). */
  profile: GpuProfile;
  workers: number;
}

export function traceDemand(trace: TimedTrace, cache: "ceiling" | "none" = "ceiling"): TraceDemand {
  const cached = cache === "ceiling" ? prefixCeiling(trace).perRequest : [];
  let prefillTokens = 0;
  let outputTokens = 0;
  let blocks = 0;
  trace.requests.forEach((r, i) => {
    prefillTokens += r.promptTokens - (cached[i] ?? 0);
    outputTokens += r.maxTokens;
    blocks += Math.ceil((r.promptTokens + r.maxTokens) / BLOCK_TOKENS);
  });
  const first = trace.requests[0]?.atMs ?? 0;
  const last = trace.requests.at(-1)?.atMs ?? 0;
  const requests = trace.requests.length;
  return { requests, prefillTokens, outputTokens, meanBlocks: requests === 0 ? 0 : blocks / requests, spanMs: Math.max(1, last - first) };
}

/** Worker-ms of engine steps the fleet needs for the demand, running saturated. */
export function fleetBusyMs(demand: TraceDemand, fleet: FleetShape): number {
  const p = fleet.profile;
  const byKv = demand.meanBlocks > 0 ? Math.floor(p.kvCapacityBlocks / demand.meanBlocks) : p.maxNumSeqs;
  const running = Math.max(1, Math.min(p.maxNumSeqs, byKv, p.maxNumBatchedTokens - 1));
  const prefillPerStep = p.maxNumBatchedTokens - running;
  const decodeMs = p.decodeStepMs * (1 + p.batchSlowdown * (running - 1));
  const mixedSteps = demand.prefillTokens / prefillPerStep;
  const mixedMs = p.prefillBaseMs + p.prefillMsPerToken * prefillPerStep + decodeMs;
  const decodeOnlySteps = Math.max(0, demand.outputTokens - mixedSteps * running) / running;
  return mixedSteps * mixedMs + decodeOnlySteps * decodeMs;
}

/** The fleet's load at a speed factor: 1 = the fleet's maximum throughput. */
export function loadAtSpeed(demand: TraceDemand, fleet: FleetShape, speed: number): number {
  return fleetBusyMs(demand, fleet) / ((fleet.workers * demand.spanMs) / speed);
}

/** The speed factor that puts the fleet at `load` (e.g. 0.8) when the trace is replayed at its timestamps. */
export function speedForLoad(demand: TraceDemand, fleet: FleetShape, load: number): number {
  return (load * fleet.workers * demand.spanMs) / fleetBusyMs(demand, fleet);
}

/** The Poisson rate, in requests per second, that puts the fleet at `load`. */
export function rateForLoad(demand: TraceDemand, fleet: FleetShape, load: number): number {
  return (load * fleet.workers * 1000 * demand.requests) / fleetBusyMs(demand, fleet);
}
