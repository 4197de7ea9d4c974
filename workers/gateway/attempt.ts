import type { ResolvedDeployment, ResolvedGroup } from "../../src/config/load.ts";
import type { FailoverCause } from "../../src/config/schema.ts";
import { reachOf } from "../../src/config/upstream-access.ts";
import type { CompletionSummary, HookContext } from "../../src/hooks/types.ts";
import { pipelineFor } from "../config.ts";
import { badGateway, badRequest, clientGone, GatewayError, gatewayTimeout, unavailable } from "../../src/openai/errors.ts";
import type { LeaseOutcome, RouteDecision, TokenUsage, UsageEstimate } from "../../src/routing/protocol.ts";
import { SILENT, type AttemptEnd, type Routed } from "./route-client.ts";
import { readFirstBytes, type FirstBytes } from "../../src/stream/first-bytes.ts";
import { handOver, relay } from "../../src/stream/relay.ts";
import { mayOutrunTap } from "../../src/stream/usage-tap.ts";
import { readWholeUsage, responsesTailBytes, tokenUsage } from "../../src/stream/usage.ts";
import { sampledForFeedback } from "../../src/routing/learned/sampling.ts";
import type { KeyRecord } from "../../src/tenants/protocol.ts";
import { readsUsage } from "../../src/tenants/route-tenant.ts";
import { answerChars, chargesEstimate, promptSize } from "../../src/tenants/estimate.ts";
import { generatesText } from "../../src/openai/endpoints.ts";
import { backendAsSeen, classifyStatus, clientError, FAILURE_CAUSE, failureKind, isBackendsOwn, isGatewaysFailure, streamErrorAnswer, type FailureKind, type NoSuccess } from "../../src/upstream/answer.ts";
import { parseErrorEvent, parseUpstreamError, type UpstreamErrorBody } from "../../src/upstream/error-body.ts";
import { heldWhole, statedLength } from "../../src/upstream/whole-read.ts";
import { readBounded } from "../../src/upstream/read-bounded.ts";
import { fetchDeployment, type Reachable } from "../../src/upstream/reach-fetch.ts";
import { parseRetryAfter, type Failure } from "../../src/upstream/retry.ts";
import type { Deadline } from "./deadline.ts";
import type { ProxyInput } from "./proxy.ts";
import { holdLease, type HeldLease } from "./route-client.ts";
import { AttemptTimer } from "./attempt-timer.ts";
import { misconfigured } from "./group-reach.ts";
import { engineRequestId } from "./request-id.ts";
import type { Endpoint, Validated } from "./validate.ts";

// Rerank and score go to their /v1 paths, whichever path the client called: vLLM serves them
// there (beside /rerank, /v2/rerank and /score), and SGLang serves only those.
const UPSTREAM_PATH: Record<Endpoint, string> = {
  chat: "/v1/chat/completions",
  completions: "/v1/completions",
  responses: "/v1/responses",
  embeddings: "/v1/embeddings",
  rerank: "/v1/rerank",
  score: "/v1/score",
};

export interface AttemptInput {
  p: ProxyInput;
  body: Validated["body"];
  /** The body as the client wrote its numbers, when JSON.parse changed one (body.ts): what goes upstream. */
  exact: Record<string, unknown> | null;
  group: ResolvedGroup;
  decision: Routed;
  /**
   * The group as the decision was routed on, when the fleet was read again since (`group`): the
   * lease is that decision's, settled and renewed as it was taken (its shards, its version).
   */
  routedOn: ResolvedGroup;
  deadline: Deadline;
  /** A non-streamed request's later attempt: when its generation must end (GenerationBudget); undefined, its group's whole nonStreamTimeoutMs. */
  generationEndsAt: number | undefined;
  /** This attempt's number, 1 for the first. */
  attempts: number;
  /** Served by a fallback group rather than the model's own. */
  fellBack: boolean;
  /** The gateway's own time on the request so far, for x-kvgate-overhead-ms. */
  own: OwnTime;
}

/**
 * The gateway's own time on a request's answer (x-kvgate-overhead-ms): what came before its first
 * route call (auth, the body's read, validation), and the answering attempt's time from its routing
 * to its upstream request. Earlier attempts' waits on their upstreams and the backoff after them
 * are not the gateway's: counted, a failed-over answer said a 429's Retry-After, or a whole
 * first-byte timeout, and the figure no longer told where the Worker should run.
 */
export class OwnTime {
  private readonly before: number;
  private from: number;

  /** Made as the request's routing begins. */
  constructor(startedAt: number, now = performance.now()) {
    this.before = now - startedAt;
    this.from = now;
  }

  /** An attempt failed and what followed it (a backoff, a Retry-After) is over: the next one's routing begins. */
  routingAgain(now = performance.now()): void {
    this.from = now;
  }

  /** Up to the answering attempt's upstream request, sent at `sentAt`. */
  ms(sentAt: number): number {
    return this.before + sentAt - this.from;
  }
}

/**
 * How an attempt ended. `answered`: the client's answer (a relayed body, or the upstream's 4xx
 * passed on; `notHeld`: a 404 for the stored response the request refers to); its lease settles
 * itself. `failed`: another backend might answer; `verdict` is what this failure says about the
 * backend, and the caller settles `lease` — a server-side failure's verdict waits to see whether
 * the next backend fails the same way (then it was the request's) — with `end`, when the attempt
 * tells more of itself. Not `retryable`: a failure no one should try again, the gateway nor its
 * client (`x-should-retry: false`).
 */
export type AttemptResult =
  | { kind: "answered"; response: Response; rejected: boolean; notHeld?: true }
  | { kind: "failed"; response: Response; lease: HeldLease; verdict: LeaseOutcome; failure: Failure; retryable: boolean; end?: AttemptEnd; generationEndsAt?: number };

/** workerd's words for a connection that failed or died before any response byte. */
const CONNECTION_LOST = /network connection lost/i;

/** A 200 stream that ended with no event, or a whole answer with no byte: an answer without a body. */
const EMPTY: NoSuccess = { kind: "backend-failure", why: "no-content" };

/** What an attempt has set going, filled in as it goes: what an exception must stop. */
interface Underway {
  abort: AbortController;
  /** Stops the attempt's timer (which renews its lease) and its watch on the client. */
  detach?: () => void;
}

/** One upstream attempt on the backend `decision` picked: it holds that lease and settles it once. */
export async function attempt(a: AttemptInput): Promise<AttemptResult> {
  const { p } = a;
  const key = p.caller.kind === "key" ? p.caller.key.record : null;
  const lease = holdLease(a.decision, a.routedOn, p.env, p.ctx, p.config.releaseFlushMs, key?.id);
  const underway: Underway = { abort: new AbortController() };
  try {
    return await attemptHeld(a, key, lease, underway);
  } catch (e) {
    // What is thrown on purpose settled the lease first. Anything else is the gateway's own
    // failure after the upstream may have answered (a response header it cannot build, a hook):
    // no verdict on the backend, and nothing of the attempt may outlive it — not its lease, which
    // its timer would renew for the isolate's life, nor the upstream's work, which no one reads.
    lease.settle("client-abort");
    underway.detach?.();
    // Cancels the upstream's body too, wherever it is read (a relay set up for it included).
    underway.abort.abort(new Error("the gateway failed"));
    throw e;
  }
}

async function attemptHeld(a: AttemptInput, key: KeyRecord | null, lease: HeldLease, underway: Underway): Promise<AttemptResult> {
  const { p, group, decision, deadline } = a;
  const { config, ctx, env } = p;
  const deployment = group.deployments.find((d) => d.id === decision.backendId);
  if (!deployment) {
    lease.settle("client-abort");
    throw unavailable(`routing for model "${a.body.model}" named a backend this gateway does not know`, "routing_unavailable");
  }
  // The backend as this caller may see it named, made only where an error names it.
  const seenAs = (): string => backendAsSeen(deployment, group, key === null);
  // Resolved once per deployment (a binding, its key, secret headers); a plain one returns at once.
  // One this isolate cannot reach is passed over before any attempt (group-reach.ts): never here.
  const reach = reachOf(deployment, env, config.gatewayKeys);
  if (!reach.ok) {
    lease.settle("client-abort");
    throw misconfigured(deployment, group, key === null, reach.problems);
  }
  const stream = a.body.stream === true;
  const counts = key !== null && readsUsage(key);
  /** What a key that counts tokens is charged by for an answer whose usage never came (src/tenants/estimate.ts). */
  const estimateFor = (end: "served" | "left" | "failed", began: boolean, usage: TokenUsage | undefined, events: number | null): UsageEstimate | undefined =>
    counts && chargesEstimate({ counts, usage: usage !== undefined, began, end }) ? { ...promptSize(a.exact ?? a.body, p.endpoint), events: events ?? 0 } : undefined;
  // A key that counts tokens, or a request sampled for routing's feedback, runs usage accounting
  // (src/hooks/usage.ts) before the group's hooks.
  const pipeline = pipelineFor(group, counts || sampledForFeedback(group.feedback));
  const hookCtx: HookContext = { requestId: p.requestId, group: group.name, clientModel: a.body.model, upstreamModel: deployment.model, backendId: deployment.id, stream, endpoint: p.endpoint };

  const upstreamBody: Record<string, unknown> = { ...(a.exact ?? a.body), model: deployment.model };
  // On a server that orders its queue by `priority` (the routing object sets one then), the order is
  // the gateway's on every endpoint: a client's own would jump every other tenant's requests, and
  // none at all would go at vLLM's default 0, before every value the gateway sets. Embeddings,
  // rerank and score have no prompt hashed, so theirs is their arrival (src/routing/engine-priority.ts).
  if (decision.priority !== undefined) upstreamBody.priority = decision.priority;
  for (const h of pipeline.request) h.onRequest?.(upstreamBody, hookCtx);
  // Serialised outside the fetch's try: a failure here is the request's, never the backend's.
  let payload: string;
  try {
    payload = JSON.stringify(upstreamBody);
  } catch (e) {
    lease.settle("rejected");
    throw badRequest(`request body cannot be serialised: ${(e as Error).message}`, null, "invalid_json");
  }
  // Plain records, not Headers objects: the runtime copies them natively once, in fetch and Response.
  const headers: Record<string, string> = { "content-type": "application/json", "x-request-id": engineRequestId(p.requestId, p.caller), "x-kvgate-routed-at": String(decision.routedAt) };
  if (stream) headers.accept = "text/event-stream";

  const { abort } = underway;
  const onClientGone = () => abort.abort(new Error("client disconnected"));
  p.req.signal.addEventListener("abort", onClientGone);
  // Gone during the route call: the listener came too late to hear it.
  if (p.req.signal.aborted) onClientGone();
  // A stream's limit is on its first token, a verdict on the backend: its headers may come long
  // before (vLLM and SGLang, through uvicorn, send them while the request still waits in the
  // engine's queue), so it holds until the body's first bytes, read before anything goes to the
  // client. A non-streamed answer comes when the generation ends, so its bound is on the
  // generation, and is the gateway's own limit, not a verdict.
  let timedOut: "first-byte" | "generation" | null = null;
  // A non-streamed request's later attempt has what its earlier ones left (generation-budget.ts).
  const endsAt = stream ? undefined : a.generationEndsAt;
  const budgeted = endsAt !== undefined;
  const [limitMs, limit] = stream ? [group.firstByteTimeoutMs, "first-byte" as const] : [endsAt === undefined ? group.nonStreamTimeoutMs : endsAt - Date.now(), "generation" as const];
  const onLimit = (): void => {
    timedOut = limit;
    abort.abort(new Error(`upstream ${limit} timeout`));
  };
  // The same timer renews the attempt's lease while it runs (attempt-timer.ts).
  const timer = new AttemptTimer(limitMs, lease.renewEveryMs, onLimit, lease.renewIfDue);
  deadline.watch(abort);
  const detach = () => {
    timer.stop();
    p.req.signal.removeEventListener("abort", onClientGone);
  };
  underway.detach = detach;

  const sentAt = performance.now();
  const routing = routingHeaders(decision, deployment, a.own.ms(sentAt), p.requestId, a.attempts, a.fellBack ? group.name : null, key === null);
  p.log?.routed(group.name, deployment.id, routeReason(decision, a.attempts, a.fellBack), decision.matched, decision.total, a.attempts);
  /** `kind`: what the attempt met, for the operator; null where the gateway's own total deadline cut it. */
  const failed = (response: Response, verdict: LeaseOutcome, cause: FailoverCause, kind: FailureKind | null, retryAfterMs: number | null, retryable = true, backendsOwn = false): Extract<AttemptResult, { kind: "failed" }> => {
    detach();
    // Its caller settles it once the next attempt shows whose failure it was: held till then.
    lease.keepRenewed();
    const failure: Failure = backendsOwn ? { cause, retryAfterMs, backendsOwn } : { cause, retryAfterMs };
    if (kind !== null) failure.kind = kind;
    const result: Extract<AttemptResult, { kind: "failed" }> = { kind: "failed", response: withHeaders(response, routing), lease, verdict, failure, retryable };
    // A first attempt's limit sets the request's generation budget (generation-budget.ts).
    if (!stream) result.generationEndsAt = endsAt ?? timer.startedAt + limitMs;
    return result;
  };
  const firstByteTimeout = (what: string): Response => gatewayTimeout(`${seenAs()} sent ${what} within ${group.firstByteTimeoutMs} ms`).toResponse();
  /**
   * The client left (thrown), or the gateway's own limits cut the attempt: what they cut short is
   * no verdict on the backend. null: the upstream itself failed. `began`: a whole answer's headers
   * came (its generation is done), so a client that left while its body was read is charged the
   * estimate a relayed one is (the prompt's: no usage came).
   */
  const cutShort = (began = false): AttemptResult | null => {
    if (p.req.signal.aborted) {
      detach();
      const estimate = estimateFor("left", began, undefined, 0);
      lease.settle("client-abort", estimate ? { estimate } : undefined);
      throw clientGone();
    }
    if (deadline.expired) return failed(gatewayTimeout(`the request exceeded its total timeout of ${deadline.totalMs} ms`).toResponse(), "client-abort", "timeout", null, null, false);
    if (timedOut === "generation") {
      // Not retried (it would redo a whole generation) and no verdict here: the routing object
      // knows whether the backend served anything else meanwhile (src/routing/silence.ts) — for a
      // cut at the group's whole limit, the window that rule reads. What earlier attempts left of
      // the request's budget may be a moment, in which a healthy backend busy with long
      // generations serves nothing too: that cut is the gateway's alone.
      const within = budgeted ? `the ${Math.max(0, Math.round(limitMs))} ms the request's earlier attempts left of its nonStreamTimeoutMs` : `${group.nonStreamTimeoutMs} ms`;
      const cut = failed(gatewayTimeout(`${seenAs()} did not finish a non-streamed answer within ${within}`).toResponse(), "client-abort", "timeout", "timeout", null, false);
      return budgeted ? cut : { ...cut, end: SILENT };
    }
    return null;
  };

  let up: Response;
  try {
    up = await fetchOnce(reach, deployment.baseUrl + UPSTREAM_PATH[p.endpoint], { method: "POST", headers, body: payload, signal: abort.signal, redirect: "manual" });
  } catch (e) {
    const cut = cutShort();
    if (cut) return cut;
    if (timedOut === "first-byte") return { ...failed(firstByteTimeout("no response headers"), "upstream-error", "timeout", "timeout", null), end: SILENT };
    // The runtime's message may carry the URL it followed; the client gets the backend's name only.
    const why = e instanceof Error && CONNECTION_LOST.test(e.message) ? "the connection failed" : "the request failed";
    return failed(badGateway(`${seenAs()} could not be reached: ${why}`).toResponse(), "upstream-error", "connect", "connect", null);
  }

  const headersAt = performance.now();
  // An answer that is no success is read (bounded) before it is judged: what it says can decide it.
  const unread = up.status === 200 && up.body !== null;
  const said = unread ? null : parseUpstreamError(await readBounded(up.body), reach.secrets);
  // Read for an answer that is no success only: a 429's or 503's wait, which can decide what a 503 is.
  const retryAfter = up.status === 200 ? null : up.headers.get("retry-after");
  // A body of length 0 is none: the runtime hands one over all the same.
  // Only the Responses API stores what a request refers to: chat passes the field on unread.
  const refersTo = p.endpoint === "responses" && typeof a.body.previous_response_id === "string" ? a.body.previous_response_id : null;
  const answer = classifyStatus(up.status, up.body !== null && up.headers.get("content-length") !== "0", said, up.headers.get("content-encoding"), up.headers.get("content-type"), retryAfter, refersTo);
  /** An answer that is no success, as `status` and `said` tell it: passed on (the request's fault), or failed (another backend may answer). */
  const notServed = (status: number, answer: NoSuccess, said: UpstreamErrorBody | null, retryAfter: string | null): AttemptResult => {
    const err = clientError(status, answer, said, seenAs(), retryAfter).toResponse();
    if (answer.kind === "rejected") {
      detach();
      lease.settle("rejected");
      return { kind: "answered", response: withHeaders(err, routing), rejected: true, ...(answer.notHeld ? { notHeld: true } : {}) };
    }
    const waitMs = status === 429 || status === 503 ? parseRetryAfter(retryAfter) : null;
    if (answer.kind === "rate-limited") return failed(err, "rate-limited", "429", "rate-limited", waitMs);
    const cut = failed(err, "upstream-error", FAILURE_CAUSE, failureKind(answer.why), waitMs, true, isBackendsOwn(answer.why));
    // A gateway's word that the engine behind it did not answer: the silence rule may judge it the backend's.
    return isGatewaysFailure(status) ? { ...cut, end: { viaGateway: true } } : cut;
  };
  if (answer.kind !== "success") {
    // A 200 judged by its headers (bytes in a coding no one can read): its body is not wanted.
    if (unread) up.body?.cancel().catch(() => {});
    return notServed(up.status, answer, said, retryAfter);
  }
  let first: FirstBytes | null | undefined;
  // A whole answer that does not say its length (chunked, or a compressed one) may have none: only
  // its first read tells, and it is read before anything goes to the client, as a stream's is.
  if (stream || statedLength(up.headers) === null) {
    try {
      // A Responses API stream's opening events come before the engine has begun the request: its first token is the event after them.
      const responses = stream && p.endpoint === "responses" && EVENT_STREAM.test(up.headers.get("content-type") ?? "text/event-stream");
      first = await readFirstBytes(up.body as ReadableStream<Uint8Array>, () => performance.now(), stream, responses);
    } catch {
      const cut = cutShort(!stream);
      if (cut) return cut;
      if (timedOut === "first-byte") return { ...failed(firstByteTimeout("its headers but no token"), "upstream-error", "timeout", "timeout", null), end: SILENT };
      return failed(badGateway(`${seenAs()} broke off its answer`).toResponse(), "upstream-error", "connect", "broken-off", null);
    }
    // An answer that ended with no event or byte answered nothing: nothing reached the client, so another backend may.
    if (first === null) return failed(clientError(200, EMPTY, null, seenAs(), null).toResponse(), "upstream-error", FAILURE_CAUSE, "bad-answer", null, true, true);
    if (first.error !== undefined) {
      // A stream that opened with its server's error (vLLM's and SGLang's answer to an exception
      // raised after the headers): nothing reached the client, so it is judged as the same request
      // unstreamed would be — passed on when the request caused it, else another backend may answer.
      up.body?.cancel().catch(() => {});
      const stated = parseErrorEvent(first.error, reach.secrets);
      const { status, answer } = streamErrorAnswer(stated, refersTo);
      return notServed(status, answer, stated, null);
    }
    if (stream) {
      timer.lift();
      lease.began();
    }
  }

  routing["content-type"] = up.headers.get("content-type") ?? (stream ? "text/event-stream" : "application/json");
  if (stream) routing["cache-control"] = "no-cache";
  let out: Record<string, string> | Headers = routing;
  if (pipeline.headers.length > 0) {
    const hooked = new Headers(routing);
    for (const h of pipeline.headers) h.onHeaders?.(hooked, hookCtx);
    out = hooked;
  }
  const transforms = [];
  for (const h of pipeline.chunk) {
    const t = h.onChunk?.(hookCtx);
    if (t) transforms.push(t);
  }
  if (!stream && pipeline.readsUsage && transforms.length === 0 && pipeline.complete.length === 0 && heldWhole(up.headers)) {
    // A non-streamed answer whose usage a key counts: the generation is done, so it is read whole
    // in one native read, its usage taken from its end — cheaper than a JavaScript loop over its
    // chunks into a pipe — and a body the upstream breaks off is a failure no byte of which reached
    // the client: another backend may answer. A larger one (or one of unknown size) is relayed.
    let whole: ArrayBuffer;
    try {
      whole = await up.arrayBuffer();
    } catch {
      return cutShort(true) ?? failed(badGateway(`${seenAs()} broke off its answer`).toResponse(), "upstream-error", "connect", "broken-off", null);
    }
    // Made before the lease settles: an answer the gateway could not make is not served.
    const response = new Response(whole, { status: 200, headers: out });
    detach();
    deadline.clear();
    const usage = tokenUsage(readWholeUsage(whole, p.endpoint === "responses"));
    const estimate = estimateFor("served", true, usage, null);
    // Its text is read only when it reported no usage: the completion of the estimate it is charged
    // (an embedding's or a score's answer generated none, and is not parsed for it).
    if (estimate && generatesText(p.endpoint)) estimate.answerChars = answerChars(whole);
    lease.settle("ok", { ttftMs: headersAt - sentAt, durationMs: performance.now() - sentAt, usage, ...(estimate ? { estimate } : {}) });
    p.log?.served(headersAt, usage);
    return { kind: "answered", response, rejected: false };
  }
  if (!stream && !pipeline.readsUsage && transforms.length === 0 && pipeline.complete.length === 0 && deadline.totalMs === undefined) {
    // A non-streamed answer is whole when its headers come (the generation is done). With no hook
    // and no total deadline, nothing needs to know when its body ends, and watching for that end
    // through a pipe costs about a fifth of the request's CPU (measured A/B with bench:ceiling).
    const body = first ? handOver(up.body as ReadableStream<Uint8Array>, first, new IdentityTransformStream()) : up.body;
    const response = new Response(body, { status: 200, headers: out });
    detach();
    // Its body came with its headers: the time to them is its first token's, and its whole answer's.
    const headersMs = performance.now() - sentAt;
    lease.settle("ok", { ttftMs: headersMs, durationMs: headersMs });
    p.log?.served(headersAt, undefined);
    return { kind: "answered", response, rejected: false };
  }
  let stalled = false;
  // A whole answer's headers came when its generation ended: what is left of its limit bounds only
  // the relay's waits on the upstream (one that drips the body), not those on a client that reads
  // slowly, which would lose an answer already made.
  const readLimitMs = stream ? undefined : Math.max(0, limitMs - (performance.now() - sentAt));
  if (!stream) timer.lift();
  // Built before anything waits on the body: headers the runtime refuses throw here, with no relay
  // under way and no request line waiting for a body's end.
  const headersOut = out instanceof Headers ? out : new Headers(out);
  p.log?.awaitBody();
  const relayed = relay(up.body as ReadableStream<Uint8Array>, {
    transforms,
    // What the answer is, not what was asked: a server that ignores `stream` answers JSON, into
    // which no event boundary may be awaited and no comment written.
    sse: stream && EVENT_STREAM.test(routing["content-type"]),
    responses: p.endpoint === "responses",
    sentAt,
    now: () => performance.now(),
    nativePipe: () => new IdentityTransformStream(),
    readUsage: pipeline.readsUsage,
    countEvents: counts,
    outrunsTap: stream && pipeline.readsUsage && mayOutrunTap(a.body),
    // A Responses answer's closing event repeats the request's fields, a server's after the usage: read where that API puts it.
    ...(pipeline.readsUsage && p.endpoint === "responses" ? { responsesUsageBytes: responsesTailBytes(payload.length) } : {}),
    ...(first !== undefined ? { first } : {}),
    clientGone: () => p.req.signal.aborted,
    onClientGone: () => abort.abort(new Error("client disconnected")),
    // Comments into a silent stream find a client that left, wherever JavaScript reads the stream
    // (a chunk hook, or a stall bound); the native pipe ignores them.
    ...(stream ? { keepAliveMs: group.streamKeepAliveMs } : {}),
    ...(readLimitMs !== undefined ? { readLimitMs, onReadLimit: onLimit } : {}),
    ...(stream && group.streamIdleTimeoutMs ? { idleTimeoutMs: group.streamIdleTimeoutMs, onIdle: () => ((stalled = true), abort.abort(new Error("upstream stream stalled"))) } : {}),
    onEnd: (summary) => {
      detach();
      deadline.clear();
      if (summary.outcome === "client-abort") abort.abort(new Error("client disconnected"));
      // A body the gateway's own limit cut was abandoned, not failed.
      const cut = deadline.expired || timedOut === "generation";
      const usage = tokenUsage(summary.usage);
      // The gateway's own relay failing (a hook threw) is no verdict on the backend, and what reached the client is charged as a left stream's.
      const own = summary.relayFailed === true;
      const outcome = (cut || own) && summary.outcome === "upstream-error" ? "client-abort" : summary.outcome;
      const left = own || summary.outcome === "client-abort" || (summary.outcome === "upstream-error" && deadline.expired);
      const estimate = estimateFor(summary.outcome === "ok" ? "served" : left ? "left" : "failed", summary.ttftMs !== null, usage, summary.events);
      // A body the upstream cut or left silent: what it met. One the gateway's own limit cut met a timeout of the gateway's.
      const failure: FailureKind | undefined = outcome !== "upstream-error" ? (timedOut === "generation" ? "timeout" : undefined) : stalled ? "stalled" : "broken-off";
      lease.settle(outcome, { ttftMs: summary.ttftMs ?? undefined, durationMs: performance.now() - sentAt, usage, ...(stream && usage ? { streamed: true } : {}), ...(estimate ? { estimate } : {}), ...(failure ? { failure } : {}) });
      if (p.log) {
        p.log.served(summary.ttftMs === null ? null : sentAt + summary.ttftMs, usage);
        p.log.bodyEnded(performance.now(), endCode(summary.outcome, stalled));
      }
      for (const h of pipeline.complete) ctx.waitUntil(Promise.resolve(h.onComplete?.(summary, hookCtx)));
    },
  });
  return { kind: "answered", response: new Response(relayed, { status: 200, headers: headersOut }), rejected: false };
}

const EVENT_STREAM = /^\s*text\/event-stream/i;

/**
 * One fetch, and once more on the same backend when the connection died before any response
 * byte. A server may close a kept-alive connection between requests without saying so (llama.cpp's
 * server does, after each streamed answer); the runtime then sends the next request on a dead
 * connection. That is no verdict on the server, and no reason to move the request — and its cache
 * — elsewhere. A second failure is real. Both go the way the deployment is reached (reach-fetch.ts).
 */
async function fetchOnce(reach: Reachable, url: string, init: RequestInit & { headers: Record<string, string> }): Promise<Response> {
  try {
    return await fetchDeployment(reach, url, init);
  } catch (e) {
    if (init.signal?.aborted || !(e instanceof Error) || !CONNECTION_LOST.test(e.message)) throw e;
    return fetchDeployment(reach, url, init);
  }
}

function withHeaders(res: Response, headers: Record<string, string>): Response {
  for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
  return res;
}

/** How a relayed body's end reads in the request's log: null, or the code of what cut it (the stream's error event's, or the client's leaving). */
function endCode(outcome: CompletionSummary["outcome"], stalled: boolean): string | null {
  if (outcome === "ok") return null;
  if (outcome === "client-abort") return "client_closed_request";
  return stalled ? "upstream_stream_stalled" : "upstream_stream_error";
}

/** Attempt number `attempt` (1 for the first) is a failover: it follows a failed one, or serves a fallback group. */
export function isFailover(attempt: number, fellBack: boolean): boolean {
  return attempt > 1 || fellBack;
}

/** Why the request went where it did, as its headers and its log line say: `failover` once a retry or a fallback group served it. */
export function routeReason(d: RouteDecision, attempts: number, fellBack: boolean): string {
  // A retried request says so; the routing reason of its last pick no longer explains it.
  return isFailover(attempts, fellBack) ? "failover" : d.reason;
}

/**
 * The answer's x-kvgate-* headers. Where a prompt went, why, and how much of it that backend held
 * (backend, reason, prefix blocks) say whether anyone sent that prefix before — under prefix-aware
 * routing, a backend holding it is picked over an idle one — so only the caller that owns the
 * whole deployment (`owner`: the master key) reads them; a virtual key, one tenant among others,
 * would have a cheap probe of the others' prompts. What it did not cost the caller's prompt
 * (attempts, fallback group, overhead, request id) every caller reads.
 */
export function routingHeaders(d: RouteDecision, dep: ResolvedDeployment, overheadMs: number, requestId: string, attempts: number, fallbackGroup: string | null, owner: boolean): Record<string, string> {
  const h: Record<string, string> = {
    "x-kvgate-attempts": String(attempts),
    "x-kvgate-overhead-ms": overheadMs.toFixed(2),
    "x-request-id": requestId,
  };
  if (owner) {
    h["x-kvgate-backend"] = dep.id;
    h["x-kvgate-reason"] = routeReason(d, attempts, fallbackGroup !== null);
    h["x-kvgate-prefix-blocks"] = `${d.matched}/${d.total}`;
  }
  if (fallbackGroup) h["x-kvgate-group"] = fallbackGroup;
  return h;
}
