import type { LeaseOutcome } from "../../src/routing/protocol.ts";
import { nextStep, type Failure, type RetryPolicy } from "../../src/upstream/retry.ts";
import type { HeldFailure } from "./held-failure.ts";

/** What the attempts do after a failed one: ask the group's next backend (after `waitMs`), go on to a fallback group, or answer with the failure. */
export type AfterFailure = { kind: "retry"; waitMs: number } | { kind: "fall-back" } | { kind: "answer" };

/**
 * After attempt number `attempts` failed with `failure`, which `held` judged (`followsRequest`:
 * HeldFailure.failed said it follows the request): for a request (proxy.ts) and a realtime
 * handshake (realtime.ts) alike. A failure that follows the request asks no other backend, but
 * for two proxies' 502s or 504s alike, as two engines dead behind them give: another backend of
 * the group may serve it, within the attempts (awaitsAnotherBackend). One not `retryable` (a
 * generation cut at its limit or the request's deadline, which a retry would run whole again)
 * asks none either. With no backend of the group asked again, a fallback group may serve it, one
 * step past the attempts' bound, where every backend tried lacked the endpoint or its proxy
 * refused the request (metOnlyAwaitingGroup), or where backends failed alike, as a group dead
 * whole behind its proxies does (awaitsFallback); never after a failure not `retryable`.
 * `msLeft`: the request's time left (Infinity for a handshake, which has no deadline).
 */
export function afterFailure(held: HeldFailure, followsRequest: boolean, retryable: boolean, policy: RetryPolicy, attempts: number, failure: Failure, msLeft: number): AfterFailure {
  const step = !retryable || (followsRequest && !held.awaitsAnotherBackend) ? null : nextStep(policy, attempts, failure, msLeft);
  if (step?.retry) return { kind: "retry", waitMs: step.waitMs };
  const fallBack = step === null ? followsRequest && held.awaitsFallback : held.metOnlyAwaitingGroup || held.awaitsFallback;
  return fallBack ? { kind: "fall-back" } : { kind: "answer" };
}

/**
 * Whether the answer to a failed attempt says `x-should-retry: false`: a failure that follows the
 * request (an SDK's retries would send it to two more backends to fail on), one the gateway does
 * not try again, and failures alike that stand as the request's whatever the attempt after them
 * met (a refused connection's 502) — but for an answer with its own word on waiting (a 429, a
 * Retry-After), which the upstream's headers give (src/upstream/answer.ts): a healthy backend's
 * `Retry-After: 1` after two dead ones' 502s is one the SDKs should wait out and retry.
 */
export function noRetry(held: HeldFailure, followsRequest: boolean, retryable: boolean, verdict: LeaseOutcome, failure: Failure): boolean {
  if (followsRequest || !retryable) return true;
  return held.awaitsFallback && verdict !== "rate-limited" && failure.retryAfterMs === null;
}
