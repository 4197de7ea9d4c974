import type { OpenLoopSummary, ReplaySummary } from "../replay/index.ts";
import type { OpenLoopSchedule } from "./open-loop-matrix.ts";

/** One run: bench/results/routing.json's `runs` entries. */
export interface RoutingRun extends ReplaySummary {
  regime: string;
  trace: string;
  /**
   * kvgate's strategy, or the name of the peer router that ran (e.g. `sglang-cache_aware`). A
   * peer's backend_share is counted from the workers' request counters (it names no backend).
   */
  strategy: string;
  sessions: number;
  seed: number;
  /** The commit and time it was made at (absent in results that predate them): a merged file's runs differ. */
  commit?: string;
  at?: string;
}

export interface RoutingResults {
  command: string;
  date: string;
  quick: boolean;
  /** Each command that made some of these runs, in order (bench/routing/merge.ts); absent in results that predate it. */
  parts?: { command: string; date: string; commit: string | null }[];
  regimes: {
    name: string;
    preset: string;
    time_scale: number;
    kv_capacity_tokens_per_worker: number;
    workers: number;
    sessions: number[];
    trace_options: unknown;
  }[];
  /** Distinct prompt tokens each trace asks the fleet to hold (seed 1), against the capacity above. */
  footprints: { regime: string; trace: string; sessions: number; working_set_tokens: number; max_prompt_tokens: number }[];
  /** kv_hit of one unbounded, zero-latency worker serving the whole trace: the ceiling for any routing. */
  ceilings: { regime: string; trace: string; sessions: number; seed: number; kv_hit: number | null }[];
  error_samples: { regime: string; trace: string; strategy: string; sessions: number; seed: number; status: number; error: string }[];
  /** The peer routers in this run's plan (absent in results that predate peers). */
  peers?: { name: string; package: string; version: string; settings: string }[];
  /** Requests sent through each router before its run and not counted (absent: no warm-up). */
  warm_up_requests?: number;
  /** How ttft_ms counts requests that timed out (bench/replay/stats.ts TTFT_RULE); absent in results made before timeouts were counted (they were left out). */
  ttft_rule?: string;
  runs: RoutingRun[];
  /** The open-loop traces' regimes (absent in results that predate them). */
  open_loop_setups?: OpenLoopSetupRecord[];
  /** Open-loop runs, beside the closed-loop `runs` (absent in results that predate them). */
  open_loop_runs?: OpenLoopRoutingRun[];
}

export interface OpenLoopSetupRecord {
  trace: string;
  preset: string;
  time_scale: number;
  workers: number;
  kv_capacity_tokens_per_worker: number;
  max_model_len: number;
  slo_ttft_ms: number;
  timeout_ms: number;
  method: string;
}

/**
 * One open-loop run: bench/results/routing.json's `open_loop_runs` entries. The replay's summary
 * (bench/replay/open-loop-stats.ts: TTFT p50/p95/p99, kv_hit with the trace's ceiling, goodput at
 * the setup's TTFT objective, queueing, backend share, errors) with what names the run.
 */
export interface OpenLoopRoutingRun extends OpenLoopSummary {
  /** "open-loop": `--regime` selects these runs by it. */
  regime: string;
  trace: string;
  /** kvgate's strategy, or the peer router's name, as in `runs`. */
  strategy: string;
  seed: number;
  arrivals: OpenLoopSchedule["arrivals"];
  load: OpenLoopSchedule["load"];
  working_set_tokens: number;
  /** kvgate's x-kvgate-reason of each request sent, counted (empty for a peer, which gives none). */
  route_reasons: Record<string, number>;
  commit?: string;
  at?: string;
}
