import { HOT_PREFIX_KEYS, hotPrefixSessions } from "./kinds/hot-prefix.ts";
import { MULTI_TURN_KEYS, multiTurnSessions } from "./kinds/multi-turn.ts";
import { RAG_KEYS, ragSessions } from "./kinds/rag.ts";
import { SINGLE_TURN_KEYS, singleTurnSessions } from "./kinds/single-turn.ts";
import { TOOL_LOOP_KEYS, toolLoopSessions } from "./kinds/tool-loop.ts";
import { resolveTraceOptions, type TraceOptions, type TraceParams } from "./options.ts";
import type { Session, Trace, TraceKind } from "./types.ts";

export type { ChatMessage, Session, ToolCall, Trace, TraceKind, Turn } from "./types.ts";
export { TRACE_KINDS } from "./types.ts";
export { TRACE_DEFAULTS, resolveTraceOptions, type TraceOptions, type TraceParams } from "./options.ts";
export { traceFootprint, type TraceFootprint } from "./footprint.ts";
export { TIMED_KINDS, type TimedKind, type TimedRequest, type TimedTrace } from "./timed.ts";
export { atSpeed, poissonArrivals, stagedPoissonArrivals, type RateStage } from "./arrivals.ts";
export { ceilingPerRequest, pooledLruHit, hitConcentration, prefixCeiling, type CeilingPerRequest, type PrefixCeiling } from "./prefix-ceiling.ts";
export { fleetBusyMs, loadAtSpeed, rateForLoad, speedForLoad, traceDemand, type FleetShape, type TraceDemand } from "./fleet-load.ts";
export { MOONCAKE_FILES, mooncakeTrace, type MooncakeFile, type MooncakeOptions } from "./kinds/mooncake.ts";
export { B2B_SAAS_DEFAULTS, LLMD_SATURATED_RPS, LLMD_STAGES, b2bSaasRateScale, b2bSaasTrace, type B2bSaasOptions } from "./kinds/b2b-saas.ts";

interface KindGenerator {
  /** The options this kind reads beyond seed, sessions, turns and maxTokens. */
  keys: readonly (keyof TraceParams)[];
  sessions(params: TraceParams): Session[];
}

const GENERATORS: Readonly<Record<TraceKind, KindGenerator>> = {
  "multi-turn": { keys: MULTI_TURN_KEYS, sessions: multiTurnSessions },
  rag: { keys: RAG_KEYS, sessions: ragSessions },
  "tool-loop": { keys: TOOL_LOOP_KEYS, sessions: toolLoopSessions },
  "single-turn": { keys: SINGLE_TURN_KEYS, sessions: singleTurnSessions },
  "hot-prefix": { keys: HOT_PREFIX_KEYS, sessions: hotPrefixSessions },
};

const COMMON_KEYS: readonly (keyof TraceParams)[] = ["seed", "sessions", "turns", "maxTokens"];

/** A seeded, deterministic trace of `kind`: the same kind and options give the same trace. */
export function generateTrace(kind: TraceKind, opts: TraceOptions = {}): Trace {
  const generator = GENERATORS[kind];
  if (!generator) throw new RangeError(`unknown trace kind ${String(kind)}`);
  const params = resolveTraceOptions(opts);
  const used: Record<string, number | string> = {};
  for (const key of [...COMMON_KEYS, ...generator.keys]) used[key] = params[key];
  return { kind, seed: params.seed, sessions: generator.sessions(params), params: used };
}
