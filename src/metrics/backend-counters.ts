import type { BreakerState } from "../routing/breaker.ts";
import type { LeaseOutcome, TokenUsage } from "../routing/protocol.ts";
import type { LearnedSnapshot } from "../routing/feedback.ts";
import type { RouteReason } from "../routing/policy.ts";
import { FAILURE_KINDS, type FailureKind } from "../upstream/answer.ts";
import { Histogram, type HistogramSnapshot } from "./histogram.ts";

/** How a lease ended: its Worker's outcome, or expired (the Worker stopped renewing it). */
export type Outcome = LeaseOutcome | "expired";

/** Why a lease went to its backend: the strategy's reason, or failover for an attempt that followed a failed one. */
export type RoutedAs = RouteReason | "failover";

/** One backend's counters as `GET /metrics` reads them (ModelGroupRpc.metrics). */
export interface BackendMetrics {
  id: string;
  /**
   * The object that answered routes for it now (its newest version names it, and the group has
   * not given the object up). Else its breaker, prefix set and what it learned are stale there — a
   * shard the group gave up, one the deployment moved from, an address let go — and only its counts
   * and requests in flight are still the backend's.
   */
  current: boolean;
  inFlight: number;
  breaker: BreakerState;
  /** Breaker transitions, by the state entered. */
  breakerTransitions: Record<BreakerState, number>;
  outcomes: Record<Outcome, number>;
  /** Failed attempts by what they met, whatever the verdict on the backend; absent from an object of an earlier release. */
  failures?: Partial<Record<FailureKind, number>>;
  /** Only the reasons seen. */
  reasons: Partial<Record<RoutedAs, number>>;
  ttft: HistogramSnapshot;
  duration: HistogramSnapshot;
  /** Summed over the leases whose release carried the upstream's usage. */
  tokens: { prompt: number; completion: number; cached: number; predictedCached: number; leases: number };
  prefix: { entries: number; capacity: number; bytes: number };
  /** What feedback from the engine taught routing about the backend. */
  learned: LearnedSnapshot;
}

/**
 * What one backend's leases did, counted as the routing object sees them: per decision a reason,
 * per release an outcome, two observations and, where usage came back, its tokens beside the
 * cached tokens routing predicted. A few numbers a request.
 */
export class BackendCounters {
  readonly outcomes: Record<Outcome, number> = { ok: 0, "upstream-error": 0, rejected: 0, "client-abort": 0, "rate-limited": 0, expired: 0 };
  readonly failures = Object.fromEntries(FAILURE_KINDS.map((k) => [k, 0])) as Record<FailureKind, number>;
  readonly reasons: Partial<Record<RoutedAs, number>> = {};
  readonly ttft = new Histogram();
  readonly duration = new Histogram();
  readonly tokens = { prompt: 0, completion: 0, cached: 0, predictedCached: 0, leases: 0 };

  routed(as: RoutedAs): void {
    this.reasons[as] = (this.reasons[as] ?? 0) + 1;
  }

  /** A lease released; `predictedCached`: the tokens its decision's matched blocks stand for; `failure`: what a failed attempt met. */
  released(outcome: LeaseOutcome, ttftMs: number | undefined, durationMs: number | undefined, usage: TokenUsage | undefined, predictedCached: number, failure?: FailureKind): void {
    this.outcomes[outcome]++;
    // A kind this release does not know (a Worker of a later one) is not a label: the set stays bounded.
    if (failure !== undefined && Object.hasOwn(this.failures, failure)) this.failures[failure]++;
    if (ttftMs !== undefined) this.ttft.observe(ttftMs / 1000);
    if (durationMs !== undefined) this.duration.observe(durationMs / 1000);
    if (!usage) return;
    const t = this.tokens;
    t.prompt += usage.prompt;
    t.completion += usage.completion;
    t.cached += usage.cached;
    t.predictedCached += predictedCached;
    t.leases++;
  }

  expired(): void {
    this.outcomes.expired++;
  }
}
