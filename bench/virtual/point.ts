import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import type { Strategy } from "../../src/config/schema.ts";
import type { LearnedSnapshot } from "../../src/routing/feedback.ts";
import { profileOf, resolveFleetOptions } from "../fleet/options.ts";
import { summarizeOpenLoop } from "../replay/open-loop-stats.ts";
import type { CensoredPercentiles } from "../stats/quantiles.ts";
import { ceilingPerRequest, type CeilingPerRequest, type TimedKind, type TimedTrace, type TraceKind } from "../traces/index.ts";
import { kvgateConfig, type Hints } from "../routing/kvgate-config.ts";
import { MODEL, PRIORITY_SUFFIX, REGIMES, traceOf, type Regime } from "../routing/matrix.ts";
import { OPEN_LOOP_SETUPS, isOpenLoopTrace, scheduleOf } from "../routing/open-loop-matrix.ts";
import { closedLoopCeiling, sessionsAsTimed } from "./closed-loop.ts";
import { replayVirtual } from "./replay.ts";
import type { SchedulingPolicy } from "../fleet/scheduler.ts";
import { UsageError } from "../harness/argv.ts";

const WORKERS = 4;
const MAX_IN_FLIGHT = 1024;

/** One virtual run: a trace's seed (a Mooncake slice) through one router, with one draw of the hops. */
export interface VirtualPoint {
  trace: TimedKind | TraceKind;
  /** A closed-loop trace's (bench:routing's session traces): its regime's name and its sessions at once. */
  regime?: string;
  sessions?: number;
  seed: number;
  strategy: Strategy;
  shards: number;
  /** Seeds the hops and the router's draws: another path the same traffic can take. */
  jitterSeed: number;
  hopMs: number;
  /** ms per MB of body before a request is routed (VirtualReplayOptions.msPerMb); absent: none. */
  msPerMb?: number;
  /** A hop's bound before a request is routed (VirtualReplayOptions.preRouteHopMs); absent: none. */
  preRouteHopMs?: number;
  /** The Worker before f50698c: no prompt size beside a cut chain (VirtualReplayOptions.chainOnly). */
  chainOnly?: boolean;
  /** The workers' scheduling policy, named in the group's deployments (absent: fcfs). */
  schedulingPolicy?: SchedulingPolicy;
  /** Every answer's usage read and learned from (VirtualReplayOptions.feedback). */
  feedback?: boolean;
  /** Every deployment's kvCapacityBlocks and prefillTokensPerSec as multiples of the workers' own (bench:routing-feedback's configs); absent: × 1. */
  hints?: Hints;
  /** A closed-loop point's trace at another seed through the same gateway and workers first, not counted (VirtualReplayOptions.before). */
  learningPass?: boolean;
}

/** A virtual run's figures, as routing.json's open-loop runs name them. */
export interface VirtualRun {
  trace: TimedKind | TraceKind;
  /** A closed-loop trace's regime and sessions; absent for an open-loop one. */
  regime?: string;
  sessions?: number;
  seed: number;
  /** The strategy, and `@N` over N shards, as bench:routing names a sharded run. */
  strategy: string;
  shards: number;
  /** The workers' order for waiting requests; absent in runs made before it was a choice (fcfs). */
  scheduling_policy?: SchedulingPolicy;
  jitter_seed: number;
  hop_ms: number;
  /** ms per MB of body before routing; absent in runs without (all made before it was a choice). */
  ms_per_mb?: number;
  /** The bound of a hop before routing, beside hop_ms's after it; absent in runs without (all made before it was a choice). */
  pre_route_hop_ms?: number;
  requests: number;
  errors: number;
  /** Over the requests answered with their usage (bench/replay/open-loop-stats.ts). */
  kv_hit: number | null;
  /** The ideal cache's kv_hit over the same requests as kv_hit. */
  kv_ceiling: number | null;
  /** The ideal cache's kv_hit over every request of the trace; absent in runs that predate it (their kv_ceiling was this). */
  kv_ceiling_trace?: number | null;
  /** By bench/replay/stats.ts ttftPercentiles' rule: a request timed out before its first token counts as the timeout, a lower bound (`at_least`). */
  ttft_ms: CensoredPercentiles;
  goodput_share: number | null;
  backend_share: Record<string, number>;
  /** The run's length in virtual time. */
  virtual_ms: number;
  /** What each backend learned from the engines, at the end; on a point that says whether feedback is on. */
  learned?: LearnedSnapshot[];
}

/** `@N` over N shards, as bench:routing names a sharded run; PRIORITY_SUFFIX in front of a priority fleet. */
export const routerName = (strategy: string, shards: number, policy: SchedulingPolicy = "fcfs"): string => `${strategy}${shards > 1 ? `@${shards}` : ""}${policy === "priority" ? PRIORITY_SUFFIX : ""}`;

/** A router learning from the engines' usage (VirtualPoint.feedback). */
const FEEDBACK_SUFFIX = "+feedback";

/** kvgate's group for the fleet, as bench:routing configures it. */
export function virtualGroup(strategy: Strategy, setup: Pick<Regime, "preset" | "timeScale">, shards: number, policy: SchedulingPolicy = "fcfs", hints?: Hints): ResolvedGroup {
  // The URLs only name the deployments: no socket is opened.
  const urls = Array.from({ length: WORKERS }, (_, i) => `http://127.0.0.1:${10_000 + i}`);
  const parsed = parseConfig(kvgateConfig(strategy, setup, urls, shards, policy, hints));
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.config.groups[0] as ResolvedGroup;
}

/** What a point replays: its traffic, the fleet it runs on, and what its summary is measured against. */
interface PointTraffic {
  trace: TimedTrace;
  arrivalsMs: readonly number[];
  fleet: Pick<Regime, "preset" | "timeScale"> & { maxModelLen?: number };
  timeoutMs: number;
  maxInFlight: number;
  kvCeiling: CeilingPerRequest | null;
  sloTtftMs: number;
  /** A closed-loop point's regime and sessions. */
  at: { regime?: string; sessions?: number };
  /** Replayed first through the same gateway and workers, not counted. */
  before?: { trace: TimedTrace; arrivalsMs: readonly number[] };
}

export function runVirtualPoint(p: VirtualPoint): VirtualRun {
  return runOn(p, isOpenLoopTrace(p.trace) ? openLoopTraffic(p, p.trace) : closedLoopTraffic(p, p.trace));
}

function openLoopTraffic(p: VirtualPoint, trace: TimedKind): PointTraffic {
  const setup = OPEN_LOOP_SETUPS[trace];
  const schedule = scheduleOf({ setup, seed: p.seed, quick: false });
  return { trace: schedule.trace, arrivalsMs: schedule.arrivalsMs, fleet: setup, timeoutMs: setup.timeoutMs, maxInFlight: MAX_IN_FLIGHT, kvCeiling: ceilingPerRequest(schedule.trace), sloTtftMs: setup.sloTtftMs, at: {} };
}

/** bench:routing-feedback's learning pass: the point's trace at this seed offset, on the fleet and here alike. */
export const LEARNING_SEED_OFFSET = 1000;

/** bench:routing's closed-loop runs wait this long for a request (bench/routing/run.ts). */
const CLOSED_LOOP_TIMEOUT_MS = 300_000;

/** The regime named `name`; another name is a wrong command line (--regime). */
export function closedLoopRegime(name: string | undefined): Regime {
  const regime = REGIMES.find((r) => r.name === name);
  if (!regime) throw new UsageError(`--regime: "${name}" is not one of ${REGIMES.map((r) => r.name).join(", ")} (an open-loop trace is run with --trace mooncake or b2b-saas)`);
  return regime;
}

/**
 * A closed-loop point as bench:routing runs it: a fresh fleet of 4 workers at the regime's preset
 * and time scale, every session at once, turns in order (bench/virtual/closed-loop.ts).
 */
function closedLoopTraffic(p: VirtualPoint, kind: TraceKind): PointTraffic {
  const regime = closedLoopRegime(p.regime);
  const sessions = p.sessions ?? NaN;
  const trace = sessionsAsTimed(traceOf({ regime, trace: kind, sessions, seed: p.seed, turns: undefined }));
  const learning = p.learningPass === true ? sessionsAsTimed(traceOf({ regime, trace: kind, sessions, seed: p.seed + LEARNING_SEED_OFFSET, turns: undefined })) : null;
  return {
    ...(learning ? { before: { trace: learning, arrivalsMs: learning.requests.map(() => 0) } } : {}),
    trace,
    arrivalsMs: trace.requests.map(() => 0),
    fleet: regime,
    timeoutMs: CLOSED_LOOP_TIMEOUT_MS,
    maxInFlight: trace.requests.length,
    kvCeiling: ceilingOnce(`${regime.name} ${kind} ${sessions} ${p.seed}`, () => closedLoopCeiling(trace, MODEL)),
    sloTtftMs: CLOSED_LOOP_TIMEOUT_MS,
    at: { regime: regime.name, sessions },
  };
}

/** Each point's ceiling, made once per thread: every router and draw of a seed shares it. */
const ceilings = new Map<string, CeilingPerRequest>();
function ceilingOnce(key: string, make: () => CeilingPerRequest): CeilingPerRequest {
  const known = ceilings.get(key);
  if (known) return known;
  const made = make();
  ceilings.set(key, made);
  return made;
}

function runOn(p: VirtualPoint, t: PointTraffic): VirtualRun {
  const { preset, timeScale, maxModelLen } = t.fleet;
  let learned: LearnedSnapshot[] = [];
  const result = replayVirtual({
    trace: t.trace,
    arrivalsMs: t.arrivalsMs,
    group: virtualGroup(p.strategy, t.fleet, p.shards, p.schedulingPolicy, p.hints),
    profile: profileOf(resolveFleetOptions({ preset, workers: WORKERS, timeScale, maxModelLen })),
    model: MODEL,
    timeoutMs: t.timeoutMs,
    seed: p.jitterSeed,
    hopMs: p.hopMs,
    msPerMb: p.msPerMb ?? 0,
    preRouteHopMs: p.preRouteHopMs ?? 0,
    maxInFlight: t.maxInFlight,
    chainOnly: p.chainOnly === true,
    schedulingPolicy: p.schedulingPolicy ?? "fcfs",
    feedback: p.feedback === true,
    ...(t.before ? { before: t.before } : {}),
    onEnd: (end) => (learned = end.learned),
  });
  const s = summarizeOpenLoop(result, { kvCeiling: t.kvCeiling, sloTtftMs: t.sloTtftMs });
  return {
    trace: p.trace,
    ...t.at,
    seed: p.seed,
    strategy: `${routerName(p.strategy, p.shards, p.schedulingPolicy)}${p.feedback === true ? FEEDBACK_SUFFIX : ""}`,
    shards: p.shards,
    ...(p.schedulingPolicy === "priority" ? { scheduling_policy: p.schedulingPolicy } : {}),
    jitter_seed: p.jitterSeed,
    hop_ms: p.hopMs,
    ...(p.msPerMb ? { ms_per_mb: p.msPerMb } : {}),
    ...(p.preRouteHopMs ? { pre_route_hop_ms: p.preRouteHopMs } : {}),
    requests: s.requests,
    errors: s.errors,
    kv_hit: s.kv_hit,
    kv_ceiling: s.kv_ceiling,
    kv_ceiling_trace: s.kv_ceiling_trace ?? null,
    ttft_ms: s.ttft_ms,
    goodput_share: s.goodput.share,
    backend_share: s.backend_share,
    virtual_ms: Math.round(result.wallMs),
    ...(p.feedback === undefined ? {} : { learned }),
  };
}
