import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import type { Strategy } from "../../src/config/schema.ts";
import { profileOf, resolveFleetOptions } from "../fleet/options.ts";
import { summarizeOpenLoop } from "../replay/open-loop-stats.ts";
import type { Percentiles } from "../stats/quantiles.ts";
import type { TimedKind } from "../traces/index.ts";
import { kvgateConfig } from "../routing/kvgate-config.ts";
import { MODEL, PRIORITY_SUFFIX } from "../routing/matrix.ts";
import { OPEN_LOOP_SETUPS, scheduleOf } from "../routing/open-loop-matrix.ts";
import { replayVirtual } from "./replay.ts";
import type { SchedulingPolicy } from "../fleet/scheduler.ts";

const WORKERS = 4;
const MAX_IN_FLIGHT = 1024;

/** One virtual run: a trace's seed (a Mooncake slice) through one router, with one draw of the hops. */
export interface VirtualPoint {
  trace: TimedKind;
  seed: number;
  strategy: Strategy;
  shards: number;
  /** Seeds the hops and the router's draws: another path the same traffic can take. */
  jitterSeed: number;
  hopMs: number;
  /** The Worker before f50698c: no prompt size beside a cut chain (VirtualReplayOptions.chainOnly). */
  chainOnly?: boolean;
  /** The workers' scheduling policy, named in the group's deployments (absent: fcfs). */
  schedulingPolicy?: SchedulingPolicy;
}

/** A virtual run's figures, as routing.json's open-loop runs name them. */
export interface VirtualRun {
  trace: TimedKind;
  seed: number;
  /** The strategy, and `@N` over N shards, as bench:routing names a sharded run. */
  strategy: string;
  shards: number;
  /** The workers' order for waiting requests; absent in runs made before it was a choice (fcfs). */
  scheduling_policy?: SchedulingPolicy;
  jitter_seed: number;
  hop_ms: number;
  requests: number;
  errors: number;
  kv_hit: number | null;
  kv_ceiling: number | null;
  ttft_ms: Percentiles;
  goodput_share: number | null;
  backend_share: Record<string, number>;
  /** The run's length in virtual time. */
  virtual_ms: number;
}

/** `@N` over N shards, as bench:routing names a sharded run; PRIORITY_SUFFIX in front of a priority fleet. */
export const routerName = (strategy: string, shards: number, policy: SchedulingPolicy = "fcfs"): string => `${strategy}${shards > 1 ? `@${shards}` : ""}${policy === "priority" ? PRIORITY_SUFFIX : ""}`;

/** kvgate's group for the fleet, as bench:routing configures it. */
export function virtualGroup(strategy: Strategy, setup: (typeof OPEN_LOOP_SETUPS)[TimedKind], shards: number, policy: SchedulingPolicy = "fcfs"): ResolvedGroup {
  // The URLs only name the deployments: no socket is opened.
  const urls = Array.from({ length: WORKERS }, (_, i) => `http://127.0.0.1:${10_000 + i}`);
  const parsed = parseConfig(kvgateConfig(strategy, setup, urls, shards, policy));
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.config.groups[0] as ResolvedGroup;
}

export function runVirtualPoint(p: VirtualPoint): VirtualRun {
  const setup = OPEN_LOOP_SETUPS[p.trace];
  const schedule = scheduleOf({ setup, seed: p.seed, quick: false });
  const profile = profileOf(resolveFleetOptions({ preset: setup.preset, workers: WORKERS, timeScale: setup.timeScale, maxModelLen: setup.maxModelLen }));
  const result = replayVirtual({
    trace: schedule.trace,
    arrivalsMs: schedule.arrivalsMs,
    group: virtualGroup(p.strategy, setup, p.shards, p.schedulingPolicy),
    profile,
    model: MODEL,
    timeoutMs: setup.timeoutMs,
    seed: p.jitterSeed,
    hopMs: p.hopMs,
    maxInFlight: MAX_IN_FLIGHT,
    chainOnly: p.chainOnly === true,
    schedulingPolicy: p.schedulingPolicy ?? "fcfs",
  });
  const s = summarizeOpenLoop(result, { kvCeiling: schedule.kv_ceiling, sloTtftMs: setup.sloTtftMs });
  return {
    trace: p.trace,
    seed: p.seed,
    strategy: routerName(p.strategy, p.shards, p.schedulingPolicy),
    shards: p.shards,
    ...(p.schedulingPolicy === "priority" ? { scheduling_policy: p.schedulingPolicy } : {}),
    jitter_seed: p.jitterSeed,
    hop_ms: p.hopMs,
    requests: s.requests,
    errors: s.errors,
    kv_hit: s.kv_hit,
    kv_ceiling: s.kv_ceiling,
    ttft_ms: s.ttft_ms,
    goodput_share: s.goodput.share,
    backend_share: s.backend_share,
    virtual_ms: Math.round(result.wallMs),
  };
}
