import { median, percentiles, type Percentiles } from "../stats/quantiles.ts";
import type { ReplayResult, RequestResult } from "./types.ts";

/**
 * Summary statistics of a replay, in the snake_case shape the routing benchmark writes to
 * bench/results/routing.json.
 */

export interface ReplaySummary {
  requests: number;
  errors: number;
  /** Σ cached_tokens / Σ prompt_tokens over successful requests that reported usage; null if none did. */
  kv_hit: number | null;
  ttft_ms: Percentiles;
  /**
   * TTFT of every turn but each session's first. All sessions open at once on empty caches, so
   * the first turns are a cold burst every strategy pays alike; the later turns are where routing
   * decides what is cached.
   */
  ttft_later_turns_ms: Percentiles;
  total_ms: { p50: number | null };
  /** Requests per backend (x-kvgate-backend) / all requests; requests without the header count under "unknown". */
  backend_share: Record<string, number>;
}

/** Token-weighted KV hit rate: long prompts weigh more than short ones, as they cost more to prefill. */
export function kvHit(requests: readonly RequestResult[]): number | null {
  let cached = 0;
  let prompt = 0;
  for (const r of requests) {
    if (r.error !== null || r.promptTokens === null) continue;
    prompt += r.promptTokens;
    cached += r.cachedTokens ?? 0;
  }
  return prompt === 0 ? null : cached / prompt;
}

export const UNKNOWN_BACKEND = "unknown";

export function backendShare(requests: readonly RequestResult[]): Record<string, number> {
  const counts = new Map<string, number>();
  for (const r of requests) {
    const key = r.backend ?? UNKNOWN_BACKEND;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const share: Record<string, number> = {};
  for (const key of [...counts.keys()].sort()) share[key] = (counts.get(key) ?? 0) / requests.length;
  return share;
}

/** Latencies are of successful requests only: a fast failure is not a fast answer. */
export function summarize(result: ReplayResult): ReplaySummary {
  const ok = result.requests.filter((r) => r.error === null);
  const ttfts: number[] = [];
  const later: number[] = [];
  for (const r of ok) {
    if (r.ttftMs === null) continue;
    ttfts.push(r.ttftMs);
    if (r.turn > 0) later.push(r.ttftMs);
  }
  return {
    requests: result.requests.length,
    errors: result.requests.length - ok.length,
    kv_hit: kvHit(ok),
    ttft_ms: percentiles(ttfts),
    ttft_later_turns_ms: percentiles(later),
    total_ms: { p50: median(ok.map((r) => r.totalMs)) },
    backend_share: backendShare(result.requests),
  };
}
