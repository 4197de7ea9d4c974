/** bench/results/routing-feedback.json, as bench:routing-feedback writes it. */

/** How a run's deployments are configured, against the simulated workers' real figures. */
export interface FeedbackConfig {
  name: string;
  /** kvCapacityBlocks as a multiple of the worker's real KV cache. */
  kv: number;
  /** prefillTokensPerSec as a multiple of the worker's real prefill rate. */
  rate: number;
}

export interface LearnedFigures {
  /** Per backend, in the order of the group's deployments. */
  kv_capacity_blocks: number[];
  chars_per_token: number[];
  prefill_tokens_per_sec: number[];
  capacity_steps: number[];
  /** Releases whose usage reached the routing object, all backends. */
  usage_reports: number;
}

export interface FeedbackRun {
  config: string;
  feedback: "off" | "on";
  sessions: number;
  seed: number;
  /** A virtual run's draw of the hops (FeedbackResults.virtual). */
  jitter_seed?: number;
  requests: number;
  errors: number;
  kv_hit: number | null;
  ttft_ms: { p50: number | null; p95: number | null };
  ttft_later_turns_ms: { p50: number | null; p95: number | null };
  /** At the end of the run. */
  learned: LearnedFigures;
}

export interface FeedbackResults {
  command: string;
  date: string;
  quick: boolean;
  regime: { name: string; preset: string; time_scale: number; workers: number; trace: string; kv_capacity_blocks_per_worker: number; prefill_tokens_per_sec: number };
  /** The group's feedback.sampleRate when feedback is on (off: 0, no usage read at all). */
  sample_rate: number;
  /**
   * Before the measured pass, the same trace shape at another seed through the same gateway and
   * fleet, not counted: a gateway runs for longer than one trace, and with feedback on this is
   * where it learns. False with --cold.
   */
  learning_pass: boolean;
  configs: FeedbackConfig[];
  warm_up_requests: number;
  /**
   * Made in virtual time (--virtual): kvgate's routing code and the fleet simulator's engine in one
   * process (bench/virtual/), each seed `draws` times with another draw of the hops (0 to
   * `pre_route_hop_ms` before routing, after a body's read at `ms_per_mb`, and 0 to `hop_ms` after;
   * runs before e59c593's delays name `hop_ms` alone), no warm-up. Absent for the fleet's runs.
   */
  virtual?: { draws: number; hop_ms: number; pre_route_hop_ms?: number; ms_per_mb?: number };
  runs: FeedbackRun[];
}
