import type { RoutingRun } from "../../bench/routing/types.ts";

/** A roomy multi-turn run of bench:routing with the given router, point and TTFT, 4 backends' worth of share. */
export function routingRun(strategy: string, sessions: number, seed: number, p50: number, p95: number, extra: Partial<RoutingRun> = {}): RoutingRun {
  return {
    regime: "roomy",
    trace: "multi-turn",
    strategy,
    sessions,
    seed,
    requests: 10,
    errors: 0,
    kv_hit: 0.9,
    ttft_ms: { p50, p95, p99: p95 },
    ttft_later_turns_ms: { p50, p95, p99: p95 },
    total_ms: { p50: p95 },
    backend_share: { "gpu-0": 0.25, "gpu-1": 0.25, "gpu-2": 0.25, "gpu-3": 0.25 },
    ...extra,
  };
}
