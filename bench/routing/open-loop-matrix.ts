import { profileOf, resolveFleetOptions } from "../fleet/options.ts";
import { UsageError } from "../harness/argv.ts";
import type { PresetName } from "../fleet/presets.ts";
import { DEFAULT_SLO_TTFT_MS } from "../replay/index.ts";
import {
  LLMD_STAGES,
  TIMED_KINDS,
  TRACE_KINDS,
  atSpeed,
  fleetBusyMs,
  b2bSaasTrace,
  loadAtSpeed,
  mooncakeTrace,
  prefixCeiling,
  speedForLoad,
  traceDemand,
  type FleetShape,
  type TimedKind,
  type TimedTrace,
} from "../traces/index.ts";
import { routersOf, type MatrixOptions } from "./matrix.ts";

/**
 * The open-loop half of bench:routing: the Mooncake conversation trace at its own timestamps and
 * llm-d's b2b-saas ramp, each replayed through every router on a fresh fleet of 4 workers.
 *
 * The regime is set by what this 2-core machine can drive without the client or the gateway
 * becoming what is measured: the replay client, workerd and the simulator share the cores, so
 * each trace keeps its streamed tokens near 1,000 per second at the fleet's full throughput (the
 * gateway relays one SSE chunk per token), and each run to about two minutes, so 6 routers × 3
 * seeds × 2 traces take about 75 minutes.
 */

/** The `regime` of open-loop runs: `--regime open-loop` selects them, a closed-loop regime leaves them out. */
export const OPEN_LOOP_REGIME = "open-loop";
export const OPEN_LOOP_TRACES: readonly TimedKind[] = TIMED_KINDS;
export const isOpenLoopTrace = (name: string): name is TimedKind => (OPEN_LOOP_TRACES as readonly string[]).includes(name);

const WORKERS = 4;

export interface OpenLoopSetup {
  kind: TimedKind;
  preset: PresetName;
  timeScale: number;
  /** The fleet's context: Mooncake prompts reach 124k tokens, past the presets' 32,768. */
  maxModelLen: number;
  /** Goodput's TTFT objective, in the fleet's scaled time. */
  sloTtftMs: number;
  /** A request not answered in full by then is an error; it also bounds a run's drain. */
  timeoutMs: number;
  /** How the trace, its seeds and its arrival times are chosen, for the report. */
  method: string;
}

/** Mooncake: each seed is another 2-minute slice of the hour, replayed at the speed that loads the fleet to LOAD. */
const MOONCAKE_LOAD = 0.85;
const MOONCAKE_SLICE_MINUTES = 2;
/**
 * Slice starts (minutes) of seeds 1, 2, 3, …: apart, so no two seeds replay the same conversations.
 * bench:routing runs the first 3 by default, bench:routing-virtual all 12: a slice's kv_hit rests
 * on a few long prompts, and on the first 6 alone the shards' verdict against one object's turned
 * on two of them.
 */
export const MOONCAKE_SLICE_STARTS: readonly number[] = [0, 20, 40, 10, 30, 50, 5, 25, 45, 15, 35, 55];

/** b2b-saas: llm-d's shape with shorter answers and the ramp's first stages (see its method). */
export const B2B_OPTIONS = { outputTokens: 32, stages: 5 } as const;
/** The load of the warm-up stage, the heaviest once answers are short, with the ideal cache's hits. */
const B2B_WARM_UP_LOAD = 0.9;

/** --quick: the first seconds of each seed's schedule. */
export const QUICK_SECONDS = 2;

const SLO = (timeScale: number) => DEFAULT_SLO_TTFT_MS * timeScale;

export const OPEN_LOOP_SETUPS: Readonly<Record<TimedKind, OpenLoopSetup>> = {
  mooncake: {
    kind: "mooncake",
    preset: "a100-7b",
    timeScale: 1,
    maxModelLen: 262_144,
    sloTtftMs: SLO(1),
    timeoutMs: 60_000,
    method:
      `The Mooncake FAST'25 conversation trace (real timestamps, the whole prompt rendered from its 512-token block ids). Seed s replays another ${MOONCAKE_SLICE_MINUTES}-minute slice of its hour, starting at minute ${MOONCAKE_SLICE_STARTS.join(", ")} for seeds 1–${MOONCAKE_SLICE_STARTS.length}, so the seeds are different traffic, not one slice reshuffled; ` +
      `each slice at the speed factor bench/traces/fleet-load.ts's speedForLoad gives for ${MOONCAKE_LOAD} load on 4 × a100-7b (its cost model at saturation, with the ideal cache's hits: a router that reaches less of the ceiling loads the fleet more; "load without cache" is that other bound). ` +
      `Time scale 1 (the A100's own latencies); answers as long as the trace's (mean ~350 tokens), ~1,000 streamed tokens/s; the workers' context raised to 262,144 tokens for its prompts of up to 124k tokens. ` +
      `kvgate's defaults take those prompts (a 124k-token prompt is a ~500 KB body against a 4 MiB limit; the fingerprint covers its first 2,048 blocks, ~32k tokens, and later blocks are not hashed).`,
  },
  "b2b-saas": {
    kind: "b2b-saas",
    preset: "a100-7b",
    timeScale: 0.5,
    maxModelLen: 32_768,
    sloTtftMs: SLO(0.5),
    timeoutMs: 20_000,
    method:
      `llm-d's shared-prefix shape: 150 groups × 5 prompts (a 6,000-token group prompt + a 1,200-token question), Poisson arrivals through llm-d's stages, seeded per seed (prompts, their order and the arrivals). ` +
      `Cut to fit this machine: answers of ${B2B_OPTIONS.outputTokens} tokens instead of 1,000 (llm-d's 1,000 would stream ~9,000 tokens/s at our fleet's saturation, several times what this machine relays beside the fleet and the client, and its 750-request warm-up alone would take 12 minutes) and its first ${B2B_OPTIONS.stages} stages (the 15/s warm-up, then 3, 10, 15, 20/s), at time scale 0.5 (every GPU latency halved). ` +
      `With short answers the warm-up, a cold pass over all 750 prompts, is the heaviest stage: scaled as bench/traces does it (b2bSaasRateScale: the whole run's mean cost against llm-d's 14.4/s saturation) it loaded the fleet to 2.7 and every router timed out half its requests in a smoke run. ` +
      `So every stage's rate is scaled (rateScale, durations ÷ it, the same requests) to put the warm-up at ${B2B_WARM_UP_LOAD} load by the cost model with the ideal cache's hits (llm-d's warm-up, 15/s, was at its fleet's 14.4/s saturation too); the later stages offer repeats of those prompts at rising rates, a light load for a router that finds them cached and several times the fleet's capacity for one that does not (each stage's two bounds below), so the ramp saturates the fleet as far as a router misses the cache. ` +
      `The working set (1.8M prompt tokens) is the fleet's whole cache, 4 × one worker's.`,
  },
};

export interface OpenLoopPoint {
  setup: OpenLoopSetup;
  /** One of kvgate's strategies, or a peer router's name. */
  strategy: string;
  seed: number;
  quick: boolean;
}

/** What a point replays, and what is known of it before it runs. */
export interface OpenLoopSchedule {
  trace: TimedTrace;
  arrivalsMs: number[];
  arrivals: { mode: "trace"; speed: number; from_minutes: number; minutes: number } | { mode: "poisson"; rate_scale: number; stages: number };
  /** The fleet's load over the run by the cost model: with the ideal cache's hits, and with none. */
  load: { at_ceiling: number; without_cache: number; target: number | null; stages?: StageLoad[] };
  /** The ideal cache's kv_hit (bench/traces/prefix-ceiling.ts). */
  kv_ceiling: number | null;
  /** Distinct prompt tokens the trace asks the fleet to hold (whole blocks). */
  working_set_tokens: number;
}

export function fleetShape(setup: Pick<OpenLoopSetup, "preset" | "timeScale">): FleetShape {
  return { workers: WORKERS, profile: profileOf(resolveFleetOptions({ preset: setup.preset, workers: WORKERS, timeScale: setup.timeScale })) };
}

export function scheduleOf(p: Pick<OpenLoopPoint, "setup" | "seed" | "quick">): OpenLoopSchedule {
  const fleet = fleetShape(p.setup);
  if (p.setup.kind === "mooncake") {
    const fromMinutes = MOONCAKE_SLICE_STARTS[p.seed - 1];
    if (fromMinutes === undefined) throw new RangeError(`mooncake has ${MOONCAKE_SLICE_STARTS.length} slices: seeds 1 to ${MOONCAKE_SLICE_STARTS.length}, not ${p.seed}`);
    const trace = mooncakeTrace({ file: "conversation", fromMinutes, minutes: MOONCAKE_SLICE_MINUTES });
    const speed = speedForLoad(traceDemand(trace), fleet, MOONCAKE_LOAD);
    const times = atSpeed(trace.requests.map((r) => r.atMs), speed);
    return finish(p, trace, times, { mode: "trace", speed, from_minutes: fromMinutes, minutes: MOONCAKE_SLICE_MINUTES }, speed, MOONCAKE_LOAD, fleet);
  }
  const options = { ...B2B_OPTIONS, seed: p.seed };
  const atOne = stageLoads(b2bSaasTrace({ ...options, rateScale: 1 }), fleet);
  const rateScale = B2B_WARM_UP_LOAD / (atOne[0]?.at_ceiling ?? NaN);
  const trace = b2bSaasTrace({ ...options, rateScale });
  const times = trace.requests.map((r) => r.atMs);
  const schedule = finish(p, trace, times, { mode: "poisson", rate_scale: rateScale, stages: B2B_OPTIONS.stages }, 1, B2B_WARM_UP_LOAD, fleet);
  // A stage's requests are the same at any rateScale, its duration ÷ rateScale: its load × rateScale.
  schedule.load.stages = atOne.map((s) => ({ rate_per_s: s.rate_per_s * rateScale, at_ceiling: s.at_ceiling * rateScale, without_cache: s.without_cache * rateScale }));
  return schedule;
}

export interface StageLoad {
  rate_per_s: number;
  /** The cost model's load of the stage's requests over its duration, with the ideal cache's hits (counted from the trace's start) and with none. */
  at_ceiling: number;
  without_cache: number;
}

/** Each of llm-d's stages of a b2b-saas trace built at rateScale 1: its rate and its load on `fleet`. */
export function stageLoads(trace: TimedTrace, fleet: FleetShape): StageLoad[] {
  const times = trace.requests.map((r) => r.atMs);
  const out: StageLoad[] = [];
  let start = 0;
  for (const stage of LLMD_STAGES.slice(0, Number(trace.params.stages))) {
    const end = start + stage.durationS * 1000;
    // The ideal cache's hits depend on every earlier request: a stage's demand is the head up to its end less the head before it.
    const before = traceDemand(headOf(trace, times, start).trace);
    const upTo = traceDemand(headOf(trace, times, end).trace);
    const own = { ...trace, requests: trace.requests.filter((r) => r.atMs >= start && r.atMs < end) };
    const alone = traceDemand(own, "none");
    const ideal = { ...alone, prefillTokens: upTo.prefillTokens - before.prefillTokens };
    const capacityMs = fleet.workers * stage.durationS * 1000;
    out.push({ rate_per_s: stage.ratePerSec, at_ceiling: fleetBusyMs(ideal, fleet) / capacityMs, without_cache: fleetBusyMs(alone, fleet) / capacityMs });
    start = end;
  }
  return out;
}

function finish(
  p: Pick<OpenLoopPoint, "quick">,
  whole: TimedTrace,
  wholeTimes: number[],
  arrivals: OpenLoopSchedule["arrivals"],
  speed: number,
  target: number | null,
  fleet: FleetShape,
): OpenLoopSchedule {
  const { trace, arrivalsMs } = p.quick ? headOf(whole, wholeTimes, QUICK_SECONDS * 1000) : { trace: whole, arrivalsMs: wholeTimes };
  const blocks = new Set<number>();
  for (const r of trace.requests) for (const b of r.blocks) blocks.add(b);
  return {
    trace,
    arrivalsMs,
    arrivals,
    load: { at_ceiling: loadAtSpeed(traceDemand(trace), fleet, speed), without_cache: loadAtSpeed(traceDemand(trace, "none"), fleet, speed), target },
    kv_ceiling: prefixCeiling(trace).kvHit,
    working_set_tokens: blocks.size * trace.blockTokens,
  };
}

/**
 * The requests due in the first `ms` of a schedule. A follow-up names an earlier request, so a
 * head of the trace keeps every turn it follows.
 */
export function headOf(trace: TimedTrace, arrivalsMs: readonly number[], ms: number): { trace: TimedTrace; arrivalsMs: number[] } {
  let n = 0;
  while (n < arrivalsMs.length && (arrivalsMs[n] ?? Infinity) < ms) n++;
  return { trace: { ...trace, params: { ...trace.params, requests: n }, requests: trace.requests.slice(0, n) }, arrivalsMs: arrivalsMs.slice(0, n) };
}

/** Throws on a --trace name that is neither a closed-loop kind nor an open-loop trace. */
export function checkTraceNames(names: readonly string[] | undefined): void {
  const known: readonly string[] = [...TRACE_KINDS, ...OPEN_LOOP_TRACES];
  const unknown = (names ?? []).filter((n) => !known.includes(n));
  if (unknown.length > 0) throw new UsageError(`--trace: unknown trace ${unknown.join(", ")} (known: ${known.join(", ")})`);
}

/**
 * Every open-loop run, after the closed-loop ones: a whole comparison (kvgate's strategies, then
 * the peers) per trace and seed. `--regime` names the open-loop runs `open-loop`; they have no
 * sessions, so `--sessions` leaves them out.
 */
export function openLoopPoints(o: MatrixOptions): OpenLoopPoint[] {
  if (o.regimes && !o.regimes.includes(OPEN_LOOP_REGIME)) return [];
  if (o.sessions) return [];
  if (o.seeds > MOONCAKE_SLICE_STARTS.length && (!o.traces || o.traces.includes("mooncake"))) {
    throw new RangeError(`--seeds: the mooncake trace has ${MOONCAKE_SLICE_STARTS.length} slices, one per seed`);
  }
  const seeds = o.quick ? [1] : Array.from({ length: o.seeds }, (_, i) => i + 1);
  const routers = routersOf(o);
  const out: OpenLoopPoint[] = [];
  for (const kind of OPEN_LOOP_TRACES) {
    if (o.traces && !o.traces.includes(kind)) continue;
    for (const seed of seeds) for (const strategy of routers) out.push({ setup: OPEN_LOOP_SETUPS[kind], strategy, seed, quick: o.quick });
  }
  return out;
}
