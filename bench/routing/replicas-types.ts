import type { ReplaySummary } from "../replay/index.ts";

/** One run: bench/results/routing-replicas.json's `runs` entries. */
export interface ReplicaRun extends ReplaySummary {
  /** kvgate's strategy or a peer's name, as in routing.json's `strategy`. */
  router: string;
  /** Router instances the requests were spread over. */
  instances: number;
  sessions: number;
  seed: number;
  /** Each instance's part of the trace's requests (the fan-out's counts). */
  instance_share: number[];
}

export interface ReplicaResults {
  command: string;
  date: string;
  quick: boolean;
  regime: { name: string; preset: string; time_scale: number; workers: number; kv_capacity_tokens_per_worker: number };
  trace: string;
  /** How a request picks its instance. */
  spread: string;
  peers: { name: string; package: string; version: string; settings: string }[];
  warm_up_requests: number;
  /** kv_hit of one unbounded, zero-latency worker serving the whole trace, per sessions and seed. */
  ceilings: { sessions: number; seed: number; kv_hit: number | null }[];
  error_samples: { router: string; instances: number; sessions: number; seed: number; status: number; error: string }[];
  runs: ReplicaRun[];
}
