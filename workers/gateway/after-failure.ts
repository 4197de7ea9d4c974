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
