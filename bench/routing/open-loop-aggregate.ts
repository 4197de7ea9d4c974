import { groupBy, key, median, ttftMedians, type Cell } from "./aggregate.ts";
import { OPEN_LOOP_REGIME } from "./open-loop-matrix.ts";
import type { OpenLoopRoutingRun } from "./types.ts";

/**
 * An open-loop point's figures, medians over seeds. It is a Cell (so the goals compare it as they
 * compare a closed-loop point) keyed at 0 sessions: open-loop traffic has no session count.
 */
export interface OpenLoopCell extends Cell {
  /** Median over seeds of the ideal cache's kv_hit over the requests each run's kv_hit counts. */
  kv_ceiling: number | null;
  /** Median over seeds of each seed's kv_hit over its own ceiling, over the same requests (each seed is another slice). */
  kv_of_ceiling: number | null;
  goodput: number | null;
  slo_ttft_ms: number | null;
  lag_p99: number | null;
  server_wait_ms: number | null;
  overflow: number;
  sent: number;
  working_set_tokens: number | null;
  /** The load the speed was chosen for, when one was (Mooncake), and the cost model's load at the ceiling. */
  load_target: number | null;
  load_at_ceiling: number | null;
  load_without_cache: number | null;
}

/** The sessions slot of an open-loop point's key. */
export const OPEN_LOOP_SESSIONS = 0;

export const openLoopKey = (trace: string, strategy: string) => key(OPEN_LOOP_REGIME, trace, OPEN_LOOP_SESSIONS, strategy);

export function aggregateOpenLoop(runs: readonly OpenLoopRoutingRun[]): Map<string, OpenLoopCell> {
  const groups = groupBy(runs, (r) => openLoopKey(r.trace, r.strategy));
  const out = new Map<string, OpenLoopCell>();
  for (const [k, rs] of groups) {
    const seeds = (pick: (r: OpenLoopRoutingRun) => number | null) => rs.map(pick).filter((x): x is number => x !== null);
    out.set(k, {
      kv_hit: median(rs.map((r) => r.kv_hit)),
      ...ttftMedians(rs),
      later_p95: null,
      total_p50: null,
      errors: rs.reduce((n, r) => n + r.errors, 0),
      requests: rs.reduce((n, r) => n + r.requests, 0),
      p50_seeds: seeds((r) => r.ttft_ms.p50),
      p95_seeds: seeds((r) => r.ttft_ms.p95),
      max_share: median(rs.map((r) => maxShare(r.backend_share))),
      seeds: rs.length,
      kv_ceiling: median(rs.map((r) => r.kv_ceiling)),
      kv_of_ceiling: median(rs.map((r) => r.kv_hit_of_ceiling)),
      goodput: median(rs.map((r) => r.goodput.share)),
      slo_ttft_ms: rs[0]?.goodput.slo_ttft_ms ?? null,
      lag_p99: median(rs.map((r) => r.queueing.send_lag_ms.p99)),
      server_wait_ms: median(rs.map((r) => r.queueing.server?.mean_wait_ms ?? null)),
      overflow: rs.reduce((n, r) => n + r.overflow, 0),
      sent: rs.reduce((n, r) => n + r.sent, 0),
      working_set_tokens: median(rs.map((r) => r.working_set_tokens)),
      load_target: rs[0]?.load.target ?? null,
      load_at_ceiling: median(rs.map((r) => r.load.at_ceiling)),
      load_without_cache: median(rs.map((r) => r.load.without_cache)),
    });
  }
  return out;
}

function maxShare(share: Record<string, number>): number | null {
  const values = Object.values(share);
  return values.length === 0 ? null : Math.max(...values);
}
