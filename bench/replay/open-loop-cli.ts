import { UsageError } from "../harness/argv.ts";
import { startFleet } from "../fleet/index.ts";
import { atSpeed, ceilingPerRequest, loadAtSpeed, poissonArrivals, rateForLoad, speedForLoad, traceDemand, type TimedKind, type TimedTrace } from "../traces/index.ts";
import { fleetFromFlags, number, timedTraceFromFlags, type TimedFlagValues } from "../traces/timed-flags.ts";
import { replayOpenLoop } from "./open-loop.ts";
import { summarizeOpenLoop } from "./open-loop-stats.ts";

/** bench/replay/cli.ts's open-loop half: the flags it reads beyond the trace's and the fleet's. */
export interface OpenLoopFlagValues extends TimedFlagValues {
  "base-url"?: string;
  model: string;
  "api-key"?: string;
  seed?: string;
  "timeout-ms"?: string;
  speed?: string;
  rate?: string;
  poisson?: boolean;
  "max-in-flight"?: string;
  "max-duration-s"?: string;
  "slo-ttft-ms"?: string;
  "metrics-url"?: string[];
  "metrics-interval-ms"?: string;
}

interface Arrivals {
  spec: { mode: "trace"; speed: number } | { mode: "poisson"; rate_per_s: number; seed: number };
  times: number[];
}

/**
 * The arrival times a run asks for: the trace's timestamps at --speed (default 1), or Poisson at
 * --rate; with --load, the speed (or, with --poisson, the rate) that puts the fleet at that load.
 */
function arrivals(trace: TimedTrace, v: OpenLoopFlagValues): Arrivals {
  const load = number("load", v.load);
  const fleet = load === undefined ? undefined : fleetFromFlags(v);
  if (fleet && fleet.profile.prefillMsPerToken === 0) throw new UsageError("--load needs the fleet's GPU preset: --preset a100-7b or l4-7b");
  const rate = fleet && load !== undefined && v.poisson ? rateForLoad(traceDemand(trace), fleet, load) : number("rate", v.rate);
  if (rate !== undefined || v.poisson) {
    if (rate === undefined) throw new UsageError("--poisson needs --rate or --load");
    const seed = number("seed", v.seed) ?? 1;
    return { spec: { mode: "poisson", rate_per_s: rate, seed }, times: poissonArrivals(trace.requests.length, rate, seed) };
  }
  const speed = fleet && load !== undefined ? speedForLoad(traceDemand(trace), fleet, load) : (number("speed", v.speed) ?? 1);
  return { spec: { mode: "trace", speed }, times: atSpeed(trace.requests.map((r) => r.atMs), speed) };
}

/** Replays one open-loop trace and prints the summary as JSON. */
export async function runOpenLoopCli(kind: TimedKind, v: OpenLoopFlagValues): Promise<void> {
  const trace = timedTraceFromFlags(kind, v);
  const plan = arrivals(trace, v);
  const fleetPreset = v.preset === "a100-7b" || v.preset === "l4-7b" ? v.preset : "instant";
  // Long Mooncake prompts (up to 191k tokens) need a context the presets' 32k does not give.
  const fleet = v["base-url"] ? undefined : await startFleet({ workers: 1, basePort: 0, preset: fleetPreset, maxModelLen: 262_144, timeScale: number("time-scale", v["time-scale"]) ?? 1 });
  const baseUrl = v["base-url"] ?? fleet?.urls[0] ?? "";
  const maxInFlight = number("max-in-flight", v["max-in-flight"]);
  const maxDurationS = number("max-duration-s", v["max-duration-s"]);
  const timeoutMs = number("timeout-ms", v["timeout-ms"]);
  const metricsIntervalMs = number("metrics-interval-ms", v["metrics-interval-ms"]);
  const metricsUrls = v["metrics-url"]?.length ? v["metrics-url"] : (fleet?.urls ?? []);
  try {
    const result = await replayOpenLoop(trace, {
      baseUrl,
      model: v.model,
      arrivalsMs: plan.times,
      metricsUrls,
      ...(v["api-key"] ? { apiKey: v["api-key"] } : {}),
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      ...(maxInFlight !== undefined ? { maxInFlight } : {}),
      ...(maxDurationS !== undefined ? { maxDurationMs: maxDurationS * 1000 } : {}),
      ...(metricsIntervalMs !== undefined ? { metricsIntervalMs } : {}),
    });
    const sloTtftMs = number("slo-ttft-ms", v["slo-ttft-ms"]);
    const summary = summarizeOpenLoop(result, { kvCeiling: ceilingPerRequest(trace), ...(sloTtftMs !== undefined ? { sloTtftMs } : {}) });
    const target = plan.spec.mode === "trace" && fleetPreset !== "instant" ? fleetFromFlags(v) : undefined;
    const firstError = result.requests.find((r) => r.outcome === "sent" && r.error !== null)?.error ?? null;
    console.log(
      JSON.stringify(
        {
          kind,
          params: trace.params,
          arrivals: plan.spec,
          ...(target && plan.spec.mode === "trace" ? { fleet_load_at_ceiling: loadAtSpeed(traceDemand(trace), target, plan.spec.speed) } : {}),
          ...summary,
          first_error: firstError,
        },
        null,
        2,
      ),
    );
  } finally {
    await fleet?.close();
  }
}
