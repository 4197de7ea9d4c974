import { startFleet } from "../fleet/index.ts";
import { replayOpenLoop, summarizeOpenLoop } from "../replay/index.ts";
import { ceilingPerRequest } from "../traces/index.ts";
import { MODEL } from "./matrix.ts";
import { OPEN_LOOP_REGIME, scheduleOf, type OpenLoopPoint, type OpenLoopSchedule } from "./open-loop-matrix.ts";
import type { RouterStart } from "./routers.ts";
import type { OpenLoopRequest } from "../replay/index.ts";
import type { OpenLoopRoutingRun, RoutingResults } from "./types.ts";
import { warmUp } from "./warm-up.ts";
import { shareBetween, workerRequestCounts } from "./worker-share.ts";

/** Requests open at once at most: past it a due request is not sent (counted as overflow). */
const MAX_IN_FLIGHT = 1024;
/** How often the workers' queue gauges are read during a run. */
const METRICS_INTERVAL_MS = 250;

/**
 * One open-loop run: a fresh fleet of 4 workers (empty caches), the router warmed up as every
 * router is, then the schedule replayed open-loop with the workers' queues sampled.
 */
export async function runOpenLoopPoint(
  p: OpenLoopPoint,
  router: RouterStart,
  schedule: OpenLoopSchedule = scheduleOf(p),
): Promise<{ run: OpenLoopRoutingRun; errorSamples: RoutingResults["error_samples"] }> {
  const { setup } = p;
  const fleet = await startFleet({ workers: 4, basePort: 0, preset: setup.preset, timeScale: setup.timeScale, maxModelLen: setup.maxModelLen, servedModelName: MODEL, schedulingPolicy: router.schedulingPolicy });
  try {
    const running = await router.start(fleet);
    try {
      const target = { ...running.target, model: MODEL, timeoutMs: setup.timeoutMs };
      await warmUp(target);
      const before = router.peer ? await workerRequestCounts(fleet.urls) : undefined;
      const result = await replayOpenLoop(schedule.trace, {
        ...target,
        arrivalsMs: schedule.arrivalsMs,
        maxInFlight: MAX_IN_FLIGHT,
        metricsUrls: fleet.urls,
        metricsIntervalMs: METRICS_INTERVAL_MS,
      });
      const summary = summarizeOpenLoop(result, { kvCeiling: ceilingPerRequest(schedule.trace), sloTtftMs: setup.sloTtftMs });
      if (before) summary.backend_share = shareBetween(before, await workerRequestCounts(fleet.urls));
      const run: OpenLoopRoutingRun = {
        regime: OPEN_LOOP_REGIME,
        trace: setup.kind,
        strategy: p.strategy,
        seed: p.seed,
        arrivals: schedule.arrivals,
        load: schedule.load,
        working_set_tokens: schedule.working_set_tokens,
        route_reasons: reasonCounts(result.requests),
        ...summary,
      };
      // A few failures of each run, verbatim: an error count alone says nothing about its cause.
      const errorSamples = result.requests
        .filter((r) => r.outcome === "sent" && r.error !== null)
        .slice(0, 3)
        .map((r) => ({ regime: run.regime, trace: run.trace, strategy: run.strategy, sessions: 0, seed: run.seed, status: r.status, error: r.error ?? "" }));
      return { run, errorSamples };
    } finally {
      await running.stop();
    }
  } finally {
    await fleet.close();
  }
}

/** How kvgate decided each request (x-kvgate-reason), counted: what a kv_hit or a tail comes from. */
export function reasonCounts(requests: readonly OpenLoopRequest[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of requests) if (r.reason !== null) out[r.reason] = (out[r.reason] ?? 0) + 1;
  return out;
}
