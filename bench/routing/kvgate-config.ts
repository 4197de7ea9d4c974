import type { GatewayConfigInput, Strategy } from "../../src/config/schema.ts";
import { PRESETS } from "../fleet/index.ts";
import type { SchedulingPolicy } from "../fleet/scheduler.ts";
import { MODEL, type Regime } from "./matrix.ts";
import { backendId } from "./worker-share.ts";

/** The two hints as multiples of the workers' real figures. */
export interface Hints {
  kv: number;
  rate: number;
}
const RIGHT: Hints = { kv: 1, rate: 1 };

/**
 * kvgate's config in front of a benchmark fleet: one group of the fleet's workers with `strategy`,
 * over `shards` routing objects; `schedulingPolicy`: the workers' (bench/fleet --scheduling-policy),
 * which the deployments name so that kvgate orders a priority fleet's queues; `hints`: the
 * deployments' kvCapacityBlocks and prefillTokensPerSec as multiples of the workers' own
 * (bench:routing-feedback's wrong configurations).
 */
export function kvgateConfig(strategy: Strategy, regime: Pick<Regime, "preset" | "timeScale">, workerUrls: readonly string[], shards = 1, schedulingPolicy: SchedulingPolicy = "fcfs", hints: Hints = RIGHT): GatewayConfigInput {
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
          kvCapacityBlocks: Math.round(PRESETS[regime.preset].kvCapacityBlocks * hints.kv),
          // The rate rounded as configured before it is scaled, as the fleet's runs had it.
          prefillTokensPerSec: Math.round(Math.round(1000 / (PRESETS[regime.preset].prefillMsPerToken * regime.timeScale)) * hints.rate),
          ...(schedulingPolicy === "priority" ? { schedulingPolicy } : {}),
        })),
      },
    ],
  };
}
