import { costModel, type WorkerCost } from "./cost-model.ts";
import { FaultDice, type FaultEvent, type FaultKnobs } from "./faults.ts";
import { PrefixCache } from "./kv-cache.ts";
import { newCounters, type WorkerCounters } from "./metrics.ts";
import type { GpuProfile } from "./presets.ts";
import { RequestLog } from "./request-log.ts";
import { BatchScheduler, type SchedulingPolicy } from "./scheduler.ts";

export interface WorkerConfig {
  index: number;
  /** Port to listen on; 0 for an ephemeral one. */
  port: number;
  servedModelName: string;
  profile: GpuProfile;
  /** The engine's order for waiting requests, and whether it takes a request's `priority`. */
  schedulingPolicy: SchedulingPolicy;
  faults: FaultKnobs;
  defaultMaxTokens: number;
  embeddingDimensions: number;
  seed: number;
  requestLogSize: number;
  /** Told when a fault takes effect (onset, a flap's down and up, death), for a benchmark's timeline. */
  onFaultEvent?: (kind: FaultEvent["kind"]) => void;
}

/** Everything one simulated GPU worker owns; the request handlers share it. */
export interface WorkerContext {
  readonly config: Readonly<WorkerConfig>;
  readonly modelJson: string;
  /** Sent with every response, so a test or benchmark sees which worker answered. */
  readonly headers: Readonly<Record<string, string>>;
  readonly cost: WorkerCost;
  /** Both replaced, empty, when a flapping worker comes back up: a restarted engine has lost them. */
  cache: PrefixCache;
  scheduler: BatchScheduler;
  readonly counters: WorkerCounters;
  readonly log: RequestLog;
  readonly dice: FaultDice;
  readonly timers: Set<NodeJS.Timeout>;
  nextId: number;
  /** Inference requests accepted, counted for dieAfterRequests. */
  accepted: number;
  /** errorRate, stallRate and slowFactor are in effect (the fault clock passed onsetMs). */
  faulty: boolean;
  dead: boolean;
  /** Set by the server: closes the port and every connection. */
  die: () => void;
}

export function createWorkerContext(config: WorkerConfig): WorkerContext {
  const { profile } = config;
  // Healthy speed until the onset; the server switches slowFactor on then.
  const cost = costModel(profile, 1);
  return {
    config,
    modelJson: JSON.stringify(config.servedModelName),
    headers: { "x-sim-worker": String(config.index) },
    cost,
    cache: new PrefixCache(profile.kvCapacityBlocks),
    scheduler: new BatchScheduler(cost, profile, config.schedulingPolicy),
    counters: newCounters(),
    log: new RequestLog(config.requestLogSize),
    // Distinct streams per worker from one fleet seed.
    dice: new FaultDice(config.seed + config.index * 0x9e3779b1),
    timers: new Set(),
    nextId: 0,
    accepted: 0,
    faulty: false,
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
