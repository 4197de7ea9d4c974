import type { GatewayConfigInput, Strategy } from "../../src/config/schema.ts";
import { PRESETS } from "../fleet/index.ts";
import type { SchedulingPolicy } from "../fleet/scheduler.ts";
import { MODEL, type Regime } from "./matrix.ts";
import { backendId } from "./worker-share.ts";

/**
 * kvgate's config in front of a benchmark fleet: one group of the fleet's workers with `strategy`,
 * over `shards` routing objects; `schedulingPolicy`: the workers' (bench/fleet --scheduling-policy),
 * which the deployments name so that kvgate orders a priority fleet's queues.
 */
export function kvgateConfig(strategy: Strategy, regime: Pick<Regime, "preset" | "timeScale">, workerUrls: readonly string[], shards = 1, schedulingPolicy: SchedulingPolicy = "fcfs"): GatewayConfigInput {
  return {
    modelGroups: [
      {
        name: MODEL,
        strategy,
        ...(shards > 1 ? { shards } : {}),
        // An operator knows each server's KV capacity (vLLM logs its GPU blocks) and prefill
        // rate; the hints are those, the rate at the regime's time scale. Every other routing
        // parameter is the default.
        deployments: workerUrls.map((baseUrl, i) => ({
          id: backendId(i),
          baseUrl,
          model: MODEL,
          kvCapacityBlocks: PRESETS[regime.preset].kvCapacityBlocks,
          prefillTokensPerSec: Math.round(1000 / (PRESETS[regime.preset].prefillMsPerToken * regime.timeScale)),
          ...(schedulingPolicy === "priority" ? { schedulingPolicy } : {}),
        })),
      },
    ],
  };
}
