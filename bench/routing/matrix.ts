import type { Strategy } from "../../src/config/schema.ts";
import type { PresetName } from "../fleet/index.ts";
import type { SchedulingPolicy } from "../fleet/scheduler.ts";
import { TRACE_KINDS, generateTrace, type Trace, type TraceKind, type TraceOptions } from "../traces/index.ts";

/** The model name the benchmark's fleets serve and its routers are asked for. */
export const MODEL = "kvgate-sim";

/**
 * What the routing benchmark sweeps. Two regimes:
 * - roomy: a 7B model on an 80 GB A100 — every trace fits in every worker's KV cache; good
 *   routing must simply never lose.
 * - pressured: the same model on a 24 GB L4 (43k tokens of KV cache per worker, 172k for the
 *   fleet of 4) with longer contexts, so from 16 sessions on a trace's working set exceeds one
 *   worker's cache but fits the fleet's. The L4's real latencies (63 ms per decode step) would
 *   make the sweep take hours, so its fleet runs at timeScale 0.2: every GPU latency × 0.2,
 *   identical for every strategy; its times are in that scaled time.
 */
export interface Regime {
  name: "roomy" | "pressured";
  preset: PresetName;
  timeScale: number;
  sessions: number[];
  /** Per trace kind, options over the generator's defaults. */
  trace: Partial<Record<TraceKind, TraceOptions>>;
  /** Trace kinds skipped in this regime, with the reason. */
  skip?: Partial<Record<TraceKind, string>>;
}

export const STRATEGY_ORDER: readonly Strategy[] = ["random", "round-robin", "least-loaded", "prefix-aware"];

export const isKvgateStrategy = (name: string): name is Strategy => (STRATEGY_ORDER as readonly string[]).includes(name);

/** kvgate's prefix-aware over `shards` routing objects (src/sharding/), as a router of the benchmark. */
export const shardedRouter = (shards: number) => `prefix-aware@${shards}`;

/** What a kvgate router's name ends with in front of workers that order their queues by the priority it sets. */
export const PRIORITY_SUFFIX = "+priority";

/**
 * A router of kvgate's: one of its strategies, or prefix-aware over shards ("prefix-aware@4"),
 * either in front of priority workers ("round-robin+priority"); null for a peer.
 */
export function kvgateRouter(name: string): { strategy: Strategy; shards: number; schedulingPolicy: SchedulingPolicy } | null {
  const priority = name.endsWith(PRIORITY_SUFFIX);
  const base = priority ? name.slice(0, -PRIORITY_SUFFIX.length) : name;
  const schedulingPolicy: SchedulingPolicy = priority ? "priority" : "fcfs";
  if (isKvgateStrategy(base)) return { strategy: base, shards: 1, schedulingPolicy };
  const m = /^prefix-aware@([1-9][0-9]*)$/.exec(base);
  return m ? { strategy: "prefix-aware", shards: Number(m[1]), schedulingPolicy } : null;
}

/**
 * The routers every point runs, in order: kvgate's strategies, prefix-aware over each number of
 * shards asked for, those again in front of priority workers when asked for, then the peers.
 */
export function routersOf(o: Pick<MatrixOptions, "strategies" | "shards" | "peers" | "schedulingPolicies">): string[] {
  const kvgate = [...STRATEGY_ORDER.filter((s) => !o.strategies || o.strategies.includes(s)), ...(o.shards ?? []).map(shardedRouter)];
  const policies = o.schedulingPolicies ?? ["fcfs"];
  return [...policies.flatMap((p) => kvgate.map((r) => (p === "priority" ? `${r}${PRIORITY_SUFFIX}` : r))), ...(o.peers ?? [])];
}

export const REGIMES: readonly Regime[] = [
  { name: "roomy", preset: "a100-7b", timeScale: 1, sessions: [4, 8, 12, 16, 24], trace: {} },
  {
    name: "pressured",
    preset: "l4-7b",
    timeScale: 0.2,
    sessions: [8, 16, 24, 32],
    trace: {
      // A 12 KB document pasted into each conversation: ~4k tokens of history per session.
      "multi-turn": { documentKB: 12 },
      "hot-prefix": { hotPrefixKB: 16 },
    },
  },
];

export interface Point {
  regime: Regime;
  trace: TraceKind;
  /** One of kvgate's strategies, or a peer router's name (bench/routing/peers.ts). */
  strategy: string;
  sessions: number;
  seed: number;
  turns: number | undefined;
}

/** The trace a point replays: its regime's options for the kind, with the point's sessions, seed and turns. */
export function traceOf(p: Omit<Point, "strategy">): Trace {
  return generateTrace(p.trace, { ...p.regime.trace[p.trace], sessions: p.sessions, seed: p.seed, ...(p.turns ? { turns: p.turns } : {}) });
}

export interface MatrixOptions {
  quick: boolean;
  seeds: number;
  regimes?: string[];
  traces?: string[];
  /** kvgate's strategies to run (all when absent). */
  strategies?: string[];
  sessions?: number[];
  /** prefix-aware over these numbers of shards, after kvgate's strategies. */
  shards?: number[];
  /** Peer routers run after kvgate's strategies at every point, in this order. */
  peers?: string[];
  /** The workers' scheduling policies kvgate's routers run in front of (fcfs when absent). */
  schedulingPolicies?: SchedulingPolicy[];
}

/** Every run, in the order they are made: a whole comparison (strategies, then peers) at a time. */
export function points(o: MatrixOptions): Point[] {
  const out: Point[] = [];
  const seeds = o.quick ? [1] : Array.from({ length: o.seeds }, (_, i) => i + 1);
  const traces = o.quick ? (["multi-turn", "hot-prefix"] as TraceKind[]) : TRACE_KINDS;
  const routers = routersOf(o);
  for (const regime of REGIMES) {
    if (o.regimes && !o.regimes.includes(regime.name)) continue;
    // Quick: one concurrency per regime (past the pressure point in the pressured one), unless
    // --sessions names the points of the sweep to run.
    const sessions = o.sessions ? regime.sessions.filter((n) => o.sessions?.includes(n)) : o.quick ? [regime.sessions[1] as number] : regime.sessions;
    for (const trace of traces) {
      if (o.traces && !o.traces.includes(trace)) continue;
      for (const n of sessions) {
        for (const seed of seeds) {
          for (const strategy of routers) out.push({ regime, trace, strategy, sessions: n, seed, turns: o.quick ? 4 : undefined });
        }
      }
    }
  }
  return out;
}
