import type { OpenLoopRequest, OpenLoopResult } from "./open-loop.ts";
import { summarizeQueue, type ServerQueueSummary } from "./queue-sampler.ts";
import { percentiles, type CensoredPercentiles, type Percentiles } from "../stats/quantiles.ts";
import type { CeilingPerRequest } from "../traces/prefix-ceiling.ts";
import { backendShare, countsForKvHit, kvHit, ttftPercentiles } from "./stats.ts";

/** Which requests kv_hit and its ceiling count, in words, for a report of `runs` (those without kv_ceiling_trace predate the rule). */
export function openLoopKvRule(runs: readonly { kv_ceiling_trace?: number | null }[]): string {
  if (runs.some((r) => r.kv_ceiling_trace === undefined)) return "kv_hit counts the requests answered in full with their usage, its ceiling every request of the trace: these runs predate taking both over the same requests.";
  return "kv_hit and its ceiling are over the same requests, those answered in full with their usage (one that timed out or failed reported none): the ceiling is what one infinite cache that sees every request of the trace in arrival order holds of those requests' prompts. The schedule's ceiling is over every request.";
}

/**
 * Goodput's TTFT objective, in the fleet's unscaled time (with the simulator at timeScale s, pass
 * 2000 × s). 2 s is nearly twice the unloaded, uncached TTFT of the Mooncake conversation trace's
 * mean prompt on one a100-7b worker (12,035 tokens in six 2,048-token prefill steps of ~187 ms,
 * ≈ 1.1 s): such a request meets it when its prefill starts within 0.9 s of its arrival, or when a
 * cache hit shortens it, and misses it once it queues behind another long prefill. Short prompts
 * meet it easily; prompts past ~22k uncached tokens (eleven steps) never do.
 */
export const DEFAULT_SLO_TTFT_MS = 2000;

export interface OpenLoopSummaryOptions {
  /** TTFT a request must meet to count towards goodput. Default DEFAULT_SLO_TTFT_MS. */
  sloTtftMs?: number;
  /** The trace's ideal cache request by request (bench/traces/prefix-ceiling.ts ceilingPerRequest), to compare kv_hit with over the same requests. */
  kvCeiling?: CeilingPerRequest | null;
}

export interface OpenLoopSummary {
  /** Every request of the trace, sent or not. */
  requests: number;
  sent: number;
  /** Sent and answered in full. */
  completed: number;
  /** Sent and failed. */
  errors: number;
  /** Not sent: due while maxInFlight were in flight. */
  overflow: number;
  /** Not sent: due after maxDurationMs. */
  cut: number;
  wall_ms: number;
  /** Requests per second the schedule offered: all requests over the span of their arrival times. */
  offered_rps: number | null;
  /** Σ cached / Σ prompt tokens over the requests answered in full that reported usage (stats.ts countsForKvHit). */
  kv_hit: number | null;
  /**
   * The ideal cache's kv_hit over the same requests as kv_hit: each one's hits as one infinite cache
   * that sees every request of the trace in arrival order has them. Over every request of the trace
   * instead, a run with timeouts measured kv_hit and its ceiling on different requests.
   */
  kv_ceiling: number | null;
  /** The ideal cache's kv_hit over every request of the trace (kv_ceiling when all are answered); absent in results that predate it. */
  kv_ceiling_trace?: number | null;
  /** kv_hit / kv_ceiling: over the same requests. */
  kv_hit_of_ceiling: number | null;
  /**
   * From sending to the first token, of every request sent, by stats.ts ttftPercentiles' rule: one
   * that timed out before its first token counts as its timeout, a lower bound ranked above every
   * answered TTFT (a percentile it reaches is listed in `at_least`); one that failed otherwise
   * before its first token is left out.
   */
  ttft_ms: CensoredPercentiles;
  goodput: {
    slo_ttft_ms: number;
    /** Completed requests whose TTFT met the objective. */
    requests: number;
    /** Of every request of the trace: one never sent was not served either. */
    share: number | null;
    /** Per second of the run's wall time. */
    per_s: number | null;
  };
  queueing: {
    /** Sent − ready: how far behind its schedule the client sent (timer lateness, rendering). */
    send_lag_ms: Percentiles & { max: number | null };
    /** Follow-ups that waited for the answer to the turn they follow, and how long past their own arrival time. */
    held_for_previous_turn: number;
    held_ms: Percentiles;
    /** From the workers' /metrics; null when the replay read none. */
    server: ServerQueueSummary | null;
  };
  backend_share: Record<string, number>;
}

export function summarizeOpenLoop(result: OpenLoopResult, opts: OpenLoopSummaryOptions = {}): OpenLoopSummary {
  const slo = opts.sloTtftMs ?? DEFAULT_SLO_TTFT_MS;
  const all = result.requests;
  const sent = all.filter((r) => r.outcome === "sent");
  const completed = sent.filter((r) => r.error === null);
  let good = 0;
  for (const r of completed) if (r.ttftMs !== null && r.ttftMs <= slo) good++;
  const lags = sent.map((r) => (r.sentMs ?? r.readyMs) - r.readyMs);
  const heldMs = all.filter((r) => r.readyMs > r.scheduledMs).map((r) => r.readyMs - r.scheduledMs);
  const span = all.length < 2 ? 0 : (all.at(-1)?.scheduledMs ?? 0) - (all[0]?.scheduledMs ?? 0);
  const kv = kvHit(completed);
  const perRequest = opts.kvCeiling ?? null;
  const ceiling = perRequest ? ceilingOver(perRequest, completed.filter(countsForKvHit)) : null;
  return {
    requests: all.length,
    sent: sent.length,
    completed: completed.length,
    errors: sent.length - completed.length,
    overflow: all.filter((r) => r.outcome === "overflow").length,
    cut: all.filter((r) => r.outcome === "cut").length,
    wall_ms: Math.round(result.wallMs),
    offered_rps: span > 0 ? ((all.length - 1) * 1000) / span : null,
    kv_hit: kv,
    kv_ceiling: ceiling,
    kv_ceiling_trace: perRequest ? ceilingOver(perRequest, all) : null,
    kv_hit_of_ceiling: kv !== null && ceiling !== null && ceiling > 0 ? kv / ceiling : null,
    ttft_ms: ttftPercentiles(sent),
    goodput: {
      slo_ttft_ms: slo,
      requests: good,
      share: all.length === 0 ? null : good / all.length,
      per_s: result.wallMs > 0 ? (good * 1000) / result.wallMs : null,
    },
    queueing: {
      send_lag_ms: { ...percentiles(lags), max: lags.length === 0 ? null : lags.reduce((m, x) => Math.max(m, x), 0) },
      held_for_previous_turn: heldMs.length,
      held_ms: percentiles(heldMs),
      server: result.serverQueue ? summarizeQueue(result.serverQueue, sent.length) : null,
    },
    backend_share: backendShare(sent),
  };
}

/** The ideal cache's Σ cached / Σ prompt tokens over `requests` (by their trace index); null for no tokens. */
function ceilingOver(ceiling: CeilingPerRequest, requests: readonly OpenLoopRequest[]): number | null {
  let cached = 0;
  let prompt = 0;
  for (const r of requests) {
    cached += ceiling.cached[r.index] ?? 0;
    prompt += ceiling.prompt[r.index] ?? 0;
  }
  return prompt === 0 ? null : cached / prompt;
}
