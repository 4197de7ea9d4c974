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
 *    (workers/gateway/held-failure.ts). Alone, that verdict stands: a body every server crashes on.
 *    But an engine dead behind Cloudflare Tunnel, nginx or an ingress shows as its proxy's instant
 *    502, and least-loaded sends each request to the idle backends first — the dead ones: a request
 *    meets two of them in a row, and without this their breakers never open while every such
 *    request fails beside healthy backends. Not an engine's own 500: a busy backend running long
 *    generations serves nothing in the few milliseconds two quick 500s take while the others serve,
 *    so a flood of requests every engine fails on (40 req/s of 8 s generations beside 20 poison
 *    requests a second) opened healthy breakers and refused normal traffic; a proxy's 502 for a
 *    request that crashed its engine is an engine down, which its breaker is for.
 * Either is the backend's when
 *  - the backend served nothing (no answer, no streamed first token, to any request) from the
 *    moment the request was sent to it until the release, and for a gateway's failure over the
 *    breaker's window before as well: one that answers others meanwhile is working, and the
 *    failure is the request's. A proxy's 502 takes milliseconds, in which a healthy busy backend
 *    serves nothing either; a backend silent for the whole window is the dead engine;
 *  - another backend of the group served a request in that stretch (for a timeout, from a
 *    timeout's length before the request was sent; for a gateway's failure, over the breaker's
 *    window): the same traffic is being answered elsewhere, so the failure is not the workload's
 *    (a whole group given generations longer than its timeout blames no one). Judged by the 502's
 *    milliseconds alone, a dead pair was charged only when another's answer happened to fall in
 *    them (in CI, 40 requests from 8 clients beside two healthy backends left one dead engine's
 *    breaker closed). A proxy's 502 or 504 is not always an engine down (a gunicorn worker killed
 *    by its timeout, a connection reset on an oversized body, a proxy's read timeout on a long
 *    generation, a tunnel's reconnect): its own silence over the window keeps such failures, a
 *    flood of them or one client's retries, off backends that served lately (found by review).
 * One such failure is one failure; the breaker opens only at `consecutiveFailures` of them with
 * nothing served between, or at its failure rate, so a healthy backend that fails one odd request
 * serves others between and never opens. A client's repeated bad requests charge no backend that
 * served within the lookback, and an engine's own answer to them is never judged: one client's
 * requests cannot open every breaker of a group that serves.
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

/** Of a group's settings, what sets the stretch a release is judged over. */
export interface SilenceSettings {
  nonStreamTimeoutMs: number;
  breaker: { windowMs: number };
}

/** The stretch a judged release is judged over (epoch ms). */
export interface SilenceWindow {
  /** Its backend served nothing from this moment to the release. */
  silentSince: number;
  /** Another backend's serving from this moment on counts against it. */
  othersSince: number;
}

/**
 * For a generation the gateway cut: its backend silent since the request was sent, another
 * serving since a timeout's length before (a long generation's answer is the group's traffic
 * too). For a gateway's 502 or 504: both over the breaker's failure-rate window before the request
 * was sent — the recent past its breaker judges the backend by.
 */
export function silenceWindow(r: Judged, sentAt: number, group: SilenceSettings): SilenceWindow {
  if (r.timedOut === true) return { silentSince: sentAt, othersSince: sentAt - group.nonStreamTimeoutMs };
  const since = sentAt - group.breaker.windowMs;
  return { silentSince: since, othersSince: since };
}

/**
 * `b`'s request failed unjudged (judgedBySilence) over `w` (silenceWindow; NaN when the request's
 * sending is unknown: no verdict); `group` holds `b` and the backends beside it (a shard's);
 * `othersServedAt`: when a backend of the group's other shards last served, as the Worker saw.
 */
export function silentWhileOthersServe(b: Served, w: SilenceWindow, group: readonly Served[], othersServedAt = -Infinity): boolean {
  if (!(b.servedAt < w.silentSince)) return false;
  if (othersServedAt >= w.othersSince) return true;
  for (const other of group) if (other !== b && other.servedAt >= w.othersSince) return true;
  return false;
}
