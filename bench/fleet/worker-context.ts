import { costModel, type CostModel } from "./cost-model.ts";
import { FaultDice, type FaultKnobs } from "./faults.ts";
import { PrefixCache } from "./kv-cache.ts";
import { newCounters, type WorkerCounters } from "./metrics.ts";
import type { GpuProfile } from "./presets.ts";
import { RequestLog } from "./request-log.ts";
import { BatchScheduler } from "./scheduler.ts";

export interface WorkerConfig {
  index: number;
  /** Port to listen on; 0 for an ephemeral one. */
  port: number;
  servedModelName: string;
  profile: GpuProfile;
  faults: FaultKnobs;
  defaultMaxTokens: number;
  seed: number;
  requestLogSize: number;
}

/** Everything one simulated GPU worker owns; the request handlers share it. */
export interface WorkerContext {
  readonly config: Readonly<WorkerConfig>;
  readonly modelJson: string;
  /** Sent with every response, so a test or benchmark sees which worker answered. */
  readonly headers: Readonly<Record<string, string>>;
  readonly cost: CostModel;
  readonly cache: PrefixCache;
  readonly scheduler: BatchScheduler;
  readonly counters: WorkerCounters;
  readonly log: RequestLog;
  readonly dice: FaultDice;
  readonly timers: Set<NodeJS.Timeout>;
  nextId: number;
  /** Inference requests accepted, counted for dieAfterRequests. */
  accepted: number;
  dead: boolean;
  /** Set by the server: closes the port and every connection. */
  die: () => void;
}

export function createWorkerContext(config: WorkerConfig): WorkerContext {
  const { profile, faults } = config;
  const cost = costModel(profile, faults.slowFactor);
  return {
    config,
    modelJson: JSON.stringify(config.servedModelName),
    headers: { "x-sim-worker": String(config.index) },
    cost,
    cache: new PrefixCache(profile.kvCapacityBlocks),
    scheduler: new BatchScheduler(cost, profile),
    counters: newCounters(),
    log: new RequestLog(config.requestLogSize),
    // Distinct streams per worker from one fleet seed.
    dice: new FaultDice(config.seed + config.index * 0x9e3779b1),
    timers: new Set(),
    nextId: 0,
    accepted: 0,
    dead: false,
    die: () => {},
  };
}

/** A timer that the worker's close() can cancel. */
export function later(ctx: WorkerContext, ms: number, fn: () => void): void {
  const timer = setTimeout(() => {
    ctx.timers.delete(timer);
    fn();
  }, ms);
  ctx.timers.add(timer);
}
