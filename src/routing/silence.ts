import type { LeaseRelease } from "./protocol.ts";

/**
 * Whether a failure no verdict charged to its backend was the backend's all the same: a backend
 * failing a request while it serves nothing else, as its neighbours serve, is failing, not the
 * request. The rule judges two kinds of release:
 *  - a non-streamed answer that did not come within the group's nonStreamTimeoutMs. Alone, such a
 *    timeout says nothing: the whole generation comes at once, and a request may be slow because
 *    of its own max_tokens. But a wedged server (a hung vLLM or llama.cpp engine behind a live HTTP
 *    server, whose health endpoint still says ok) answers no request at all, and without a verdict
 *    it would keep its share of the non-streamed traffic for ever, each request waiting out the
 *    timeout;
 *  - a gateway's 502 or 504 judged the request's because a second backend failed it alike
 *    (workers/gateway/held-failure.ts), a request's or a realtime handshake's refused upgrade
 *    alike (workers/gateway/realtime-handshake.ts: a session serves once its engine's first
 *    message is told, LeaseRenewal.serving). Alone, that verdict stands: a body every server crashes on.
 *    But an engine dead behind Cloudflare Tunnel, nginx or an ingress shows as its proxy's instant
 *    502, and least-loaded sends each request to the idle backends first — the dead ones: a request
 *    meets two of them in a row. The gateway then asks a third backend, whose answer charges the
 *    pair (held-failure.ts awaitsAnotherBackend); this rule judges what is left without a serving
 *    backend's word (`maxAttempts: 2` and no fallback group, no other backend free, the third
 *    failing alike). Its window runs from the request's sending to the release — the 502s'
 *    milliseconds, or with a third attempt that failed too, its time as well. Wider
 *    (the breaker's window before them, c036883 and c8f22a1), reviews found healthy backends
 *    opened by a flood of such requests, by one client's retries, by a 2 s outage of a proxy
 *    every backend shares, after an object's restart and beside long generations
 *    (test/unit/routing.test.ts). Not an engine's own 500: a busy backend running long
 *    generations serves nothing in the few milliseconds two quick 500s take while the others serve,
 *    so a flood of requests every engine fails on (40 req/s of 8 s generations beside 20 poison
 *    requests a second) opened healthy breakers and refused normal traffic; a proxy's 502 for a
 *    request that crashed its engine is an engine down, which its breaker is for.
 * Either is the backend's when
 *  - the backend served nothing (no answer, no streamed first token, to any request) from the
 *    moment the request was sent to it until the release: one that answers others meanwhile is
 *    working, and the failure is the request's; and
 *  - another backend of the group served a request in that time (for a timeout, or in the
 *    timeout's length before it): the same traffic is being answered elsewhere, so the failure is
 *    not the workload's (a whole group given generations longer than its timeout blames no one).
 * One such failure is one failure; the breaker opens only at `consecutiveFailures` of them with
 * nothing served between, so a healthy backend that fails one odd request serves others between
 * and never opens. A client's repeated bad requests at low traffic charge nothing (no other
 * backend serves meanwhile): one client cannot open every breaker of a group.
 * A first token not come in time is not judged so (workers/gateway/held-failure.ts cut): a prompt
 * too long to prefill in time, on a backend the rest of the traffic was steered away from, serves
 * nothing while others serve, and charged, it opens the breaker of the first backend it meets.
 */

/** What the rule reads of a backend: when it last served a request (epoch ms; −Infinity: never, as this object knows). */
export interface Served {
  servedAt: number;
}

/** Of a release, what says whether the rule judges it. */
export type Judged = Pick<LeaseRelease, "outcome" | "timedOut" | "failure" | "viaGateway">;

/**
 * Whether the rule judges `r`: a non-streamed generation the gateway cut, or a gateway's 502 or 504
 * (LeaseRelease.viaGateway) judged the request's. A refused connection, an answer broken off, a 503
 * saying the server's state are their backend's at once, never the request's.
 */
export function judgedBySilence(r: Judged): boolean {
  return r.timedOut === true ? r.outcome === "client-abort" : r.outcome === "rejected" && r.failure === "server-error" && r.viaGateway === true;
}

/**
 * How long before a judged release's request was sent another backend's serving still counts
 * against its backend (ms): a timeout's length for a generation the gateway cut (a long
 * generation's answer is the group's traffic too), none for a failure that came at once.
 */
export function silenceLookbackMs(r: Judged, nonStreamTimeoutMs: number): number {
  return r.timedOut === true ? nonStreamTimeoutMs : 0;
}

/**
 * `b`'s request, sent at `sentAt` (NaN when unknown: no verdict), failed unjudged (judgedBySilence;
 * its lookback: silenceLookbackMs); `group` holds `b` and the backends beside it (a shard's);
 * `othersServedAt`: when a backend of the group's other shards last served, as the Worker saw.
 */
export function silentWhileOthersServe(b: Served, sentAt: number, lookbackMs: number, group: readonly Served[], othersServedAt = -Infinity): boolean {
  if (!(b.servedAt < sentAt)) return false;
  const since = sentAt - lookbackMs;
  if (othersServedAt >= since) return true;
  for (const other of group) if (other !== b && other.servedAt >= since) return true;
  return false;
}
