import type { FailoverCause } from "../config/schema.ts";
import type { FailureKind } from "./answer.ts";

/**
 * Whether a request that failed on a backend goes to another one, and after how long. Pure: the
 * request path passes the clock's remaining budget and the random source.
 */
export interface RetryPolicy {
  maxAttempts: number;
  on: readonly FailoverCause[];
  backoffMs: number;
  backoffMaxMs: number;
  retryAfterCapMs: number;
}

export interface Failure {
  cause: FailoverCause;
  /** What the attempt met, for the operator's metrics and logs; absent where the gateway's own limit cut it (a total timeout). */
  kind?: FailureKind;
  /** The upstream's Retry-After (a 429's or 503's), in ms; null when it sent none. */
  retryAfterMs: number | null;
  /**
   * No request can cause it (the backend refused the gateway's key with a 401, redirected, serves
   * another model, answered nothing): always the backend's, whatever failed before or after it. A
   * proxy's 403 is not: a firewall in front of the engines refuses a request by what it holds
   * (workers/gateway/held-failure.ts).
   */
  backendsOwn?: boolean;
}

export type Step = { retry: true; waitMs: number } | { retry: false };

/**
 * After `attempts` attempts, the last of which failed with `failure`: retry on the next-best
 * backend unless attempts are spent, the cause is not one the group retries, or the request's
 * deadline has passed (`msLeft`, Infinity when it has none). A Retry-After up to the cap is waited
 * for; a longer one is that backend's to sit out (after a 429 the router spares it meanwhile): the
 * next is asked at once, and with none to ask the client gets that Retry-After. A wait (a
 * Retry-After, a backoff) the deadline leaves no time for is not made either: it is the failed
 * backend's, which the next attempt does not ask, so the next one is asked at once.
 */
export function nextStep(policy: RetryPolicy, attempts: number, failure: Failure, msLeft: number, rng: () => number = Math.random): Step {
  if (attempts >= policy.maxAttempts || !policy.on.includes(failure.cause) || msLeft <= 0) return { retry: false };
  if (failure.retryAfterMs !== null && failure.retryAfterMs > policy.retryAfterCapMs) return { retry: true, waitMs: 0 };
  const waitMs = failure.retryAfterMs ?? backoff(policy.backoffMs, policy.backoffMaxMs, attempts, rng);
  return { retry: true, waitMs: waitMs < msLeft ? waitMs : 0 };
}

/** Full jitter: uniform in [0, min(max, base × 2^(attempt − 1))]. */
export function backoff(baseMs: number, maxMs: number, attempt: number, rng: () => number = Math.random): number {
  return rng() * Math.min(maxMs, baseMs * 2 ** (attempt - 1));
}

/** Retry-After in seconds or as an HTTP date, in ms; null when absent or unreadable. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds * 1000 : null;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/**
 * A failure on the server's side of the exchange — a 5xx-class answer, or no headers in time —
 * may be the request's own doing (a body a server crashes on, a prompt too long to prefill in
 * time). One such failure says nothing yet; the same failure on a second backend says it follows
 * the request. A refused connection, a 429 and a failure that is the backend's own never do.
 */
export function isServerSide(failure: Failure): boolean {
  return !failure.backendsOwn && (failure.cause === "5xx" || failure.cause === "timeout");
}
