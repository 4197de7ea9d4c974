import { censoredPercentiles, median, type CensoredPercentiles } from "../stats/quantiles.ts";
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
  /** By ttftPercentiles' rule: a request that timed out before its first token counts as its timeout, a lower bound. */
  ttft_ms: CensoredPercentiles;
  /**
   * TTFT of every turn but each session's first. All sessions open at once on empty caches, so
   * the first turns are a cold burst every strategy pays alike; the later turns are where routing
   * decides what is cached.
   */
  ttft_later_turns_ms: CensoredPercentiles;
  total_ms: { p50: number | null };
  /** Requests per backend (x-kvgate-backend) / all requests; requests without the header count under "unknown". */
  backend_share: Record<string, number>;
}

/**
 * Whether kv_hit counts a request: answered in full, with the usage its stream ends with. One that
 * timed out or failed reported no usage (a stream's usage comes last), so what it found cached is
 * not known; a kv_hit ceiling is taken over the same requests (open-loop-stats.ts).
 */
export function countsForKvHit(r: RequestResult): boolean {
  return r.error === null && r.promptTokens !== null;
}

/** Token-weighted KV hit rate: long prompts weigh more than short ones, as they cost more to prefill. */
export function kvHit(requests: readonly RequestResult[]): number | null {
  let cached = 0;
  let prompt = 0;
  for (const r of requests) {
    if (!countsForKvHit(r)) continue;
    prompt += r.promptTokens ?? 0;
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

/** ttftPercentiles' rule in words, for the reports that show its figures. */
export const TTFT_RULE =
  "TTFT counts every request sent: one that timed out before its first token counts as its timeout, ranked above every answer, and a percentile (or a median of them) that reaches such a request is that bound, a lower bound shown ≥ (`at_least` in the JSON); one whose first token came keeps its TTFT however it ended; one that failed otherwise before its first token (an HTTP error, a refused connection) has no TTFT and counts among the errors only.";

/** What a report says of TTFT: the rule its results were made by (their ttft_rule), or that they predate it. */
export function ttftRuleOf(results: { ttft_rule?: string }): string {
  return results.ttft_rule ?? "TTFT counts the requests answered in full only: these results predate counting a request that timed out (as its timeout, a lower bound), so a router with more timeouts shows a lower TTFT than it had.";
}

/**
 * TTFT over requests, as every replay summary counts it. A timeout is the slowest kind of answer,
 * not a missing one: leaving timed-out requests out gave a router with more of them a lower p95.
 * - A request whose first token came has its TTFT, however it ended (answered, timed out, broken off).
 * - One that timed out before its first token counts as censored at its timeout (timedOutMs): a
 *   lower bound, ranked above every answered request's TTFT (which came before its end, within the
 *   timeout); a percentile it reaches is that bound and is listed in `at_least`.
 * - One that failed otherwise before its first token (an HTTP error, a refused or broken
 *   connection) is left out: it has neither a time nor a bound, and `errors` counts it.
 */
export function ttftPercentiles(requests: readonly RequestResult[]): CensoredPercentiles {
  const measured: number[] = [];
  const bounds: number[] = [];
  for (const r of requests) {
    if (r.ttftMs !== null) measured.push(r.ttftMs);
    else if (r.timedOutMs !== undefined) bounds.push(r.timedOutMs);
  }
  return censoredPercentiles(measured, bounds);
}

/** TTFT by ttftPercentiles' rule; the whole answer's time of successful requests only (a fast failure is not a fast answer). */
export function summarize(result: ReplayResult): ReplaySummary {
  const ok = result.requests.filter((r) => r.error === null);
  return {
    requests: result.requests.length,
    errors: result.requests.length - ok.length,
    kv_hit: kvHit(ok),
    ttft_ms: ttftPercentiles(result.requests),
    ttft_later_turns_ms: ttftPercentiles(result.requests.filter((r) => r.turn > 0)),
    total_ms: { p50: median(ok.map((r) => r.totalMs)) },
    backend_share: backendShare(result.requests),
  };
}
