import type { ReplaySummary } from "../replay/index.ts";

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
}

export interface RoutingResults {
  command: string;
  date: string;
  quick: boolean;
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
  runs: RoutingRun[];
}
