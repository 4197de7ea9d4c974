import type { Strategy } from "../../src/config/schema.ts";
import type { PresetName } from "../fleet/index.ts";
import { TRACE_KINDS, type TraceKind, type TraceOptions } from "../traces/index.ts";

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
  strategy: Strategy;
  sessions: number;
  seed: number;
  turns: number | undefined;
}

export interface MatrixOptions {
  quick: boolean;
  seeds: number;
  regimes?: string[];
  traces?: string[];
  strategies?: string[];
  sessions?: number[];
}

/** Every run, in the order they are made: a whole strategy comparison at a time. */
export function points(o: MatrixOptions): Point[] {
  const out: Point[] = [];
  const seeds = o.quick ? [1] : Array.from({ length: o.seeds }, (_, i) => i + 1);
  const traces = o.quick ? (["multi-turn", "hot-prefix"] as TraceKind[]) : TRACE_KINDS;
  for (const regime of REGIMES) {
    if (o.regimes && !o.regimes.includes(regime.name)) continue;
    // Quick: one concurrency per regime (past the pressure point in the pressured one).
    const sessions = o.quick ? [regime.sessions[1] as number] : regime.sessions;
    for (const trace of traces) {
      if (o.traces && !o.traces.includes(trace)) continue;
      for (const n of sessions) {
        if (o.sessions && !o.sessions.includes(n)) continue;
        for (const seed of seeds) {
          for (const strategy of STRATEGY_ORDER) {
            if (o.strategies && !o.strategies.includes(strategy)) continue;
            out.push({ regime, trace, strategy, sessions: n, seed, turns: o.quick ? 4 : undefined });
          }
        }
      }
    }
  }
  return out;
}
