import type { ResolvedDeployment, ResolvedGroup } from "../../src/config/load.ts";
import type { HookContext, HookPipeline } from "../../src/hooks/types.ts";
import { badGateway, badRequest, GatewayError, gatewayTimeout, notFound, unavailable } from "../../src/openai/errors.ts";
import type { FailoverCause } from "../../src/config/schema.ts";
import type { LeaseOutcome, RouteDecision, RouteRefusal } from "../../src/routing/group-router.ts";
import { relay } from "../../src/stream/relay.ts";
import type { LoadedConfig } from "../config.ts";
import type { Env, WaitUntil } from "../env.ts";
import { readJsonBody } from "./body.ts";
import { validate, type Endpoint, type Validated } from "./validate.ts";
import { queueRelease, requeue, takePending } from "./lease-queue.ts";

const UPSTREAM_PATH: Record<Endpoint, string> = { chat: "/v1/chat/completions", completions: "/v1/completions" };

export interface ProxyInput {
  endpoint: Endpoint;
  req: Request;
  env: Env;
  ctx: WaitUntil;
  config: LoadedConfig;
  requestId: string;
  startedAt: number;
}

/** One upstream attempt's result: a response for the client, or a failure another backend may not have. */
type Attempt = { response: Response } | { failure: Response; cause: FailoverCause; retryAfterMs: number | null };

/**
 * The request path: validate once, fingerprint, one route call to the group's Durable Object,
 * one upstream fetch, and the upstream body handed to the client as it arrives. Before any byte
 * reached the client, a failed attempt (refused connection, no headers in time, 5xx, 429) is
 * retried on the next-best backend of the group, then of its fallback groups.
 */
export async function proxyCompletion(p: ProxyInput): Promise<Response> {
  const { config, env } = p;
  const raw = await readJsonBody(p.req, config.limits.maxBodyBytes);
  const { body, chain: fingerprint } = validate(p.endpoint, raw, config);
  const primary = config.byModel.get(body.model);
  if (!primary) throw notFound(`model "${body.model}" does not exist on this gateway (GET /v1/models lists them)`, "model_not_found");

  const { failover } = primary;
  const total = new TotalTimer(primary.totalTimeoutMs);
  let fellBackTo = 0;
  let group = primary;
  let chain = fingerprint(group);
  let exclude: number[] = [];
  let attempts = 0;
  let last: Response | null = null;
  for (;;) {
    const decision = await routeCall(env, group, chain, exclude, body.model);
    if ("refused" in decision) {
      // Fallback names were checked against the groups when the config loaded.
      const name = primary.fallbacks[fellBackTo++];
      const next = name === undefined ? undefined : config.byModel.get(name);
      if (next) {
        group = next;
        chain = fingerprint(group);
        exclude = [];
        continue;
      }
      total.clear();
      if (last) return last;
      throw decision.refused === "at-capacity"
        ? unavailable(`every backend of model "${body.model}" is at its in-flight limit`)
        : unavailable(`no healthy backend for model "${body.model}": every one is failing or its circuit is open`);
    }
    attempts++;
    const result = await attempt(p, body, group, decision, total, attempts, group !== primary);
    if ("response" in result) return result.response;
    last = result.failure;
    const wait = result.retryAfterMs ?? backoff(failover.backoffMs, failover.backoffMaxMs, attempts);
    const retry =
      attempts < failover.maxAttempts &&
      failover.on.includes(result.cause) &&
      (result.retryAfterMs === null || result.retryAfterMs <= failover.retryAfterCapMs) &&
      !total.expiresWithin(wait);
    if (!retry) {
      total.clear();
      return last;
    }
    exclude.push(decision.backend);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    if (p.req.signal.aborted) {
      total.clear();
      throw new GatewayError(499, "invalid_request_error", "client disconnected", "client_closed_request");
    }
  }
}

async function routeCall(env: Env, group: ResolvedGroup, chain: number[], exclude: number[], model: string): Promise<RouteDecision | RouteRefusal> {
  const released = takePending(group.name);
  try {
    return await env.MODEL_GROUP.getByName(group.name).route(group.name, chain, released, exclude);
  } catch (e) {
    requeue(group.name, released);
    console.error(`kvgate: route call for ${group.name} failed: ${(e as Error).message}`);
    throw unavailable(`routing for model "${model}" is unavailable`, "routing_unavailable");
  }
}

/** Full jitter: uniform in [0, min(max, base × 2^(attempt − 1))]. */
function backoff(baseMs: number, maxMs: number, attempt: number): number {
  return Math.random() * Math.min(maxMs, baseMs * 2 ** (attempt - 1));
}

/** The group's bound on the whole request, retries and stream included. */
class TotalTimer {
  private readonly deadline: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  expired = false;

  constructor(totalMs: number | undefined) {
    this.deadline = totalMs === undefined ? Infinity : Date.now() + totalMs;
  }

  get bounded(): boolean {
    return this.deadline !== Infinity;
  }

  expiresWithin(ms: number): boolean {
    return Date.now() + ms >= this.deadline;
  }

  /** Aborts `abort` when the deadline passes (the attempt, then the stream it became). */
  watch(abort: AbortController): void {
    if (!this.bounded) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.expired = true;
      abort.abort(new Error("request exceeded its total timeout"));
    }, Math.max(0, this.deadline - Date.now()));
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}

/** One upstream attempt on the backend `decision` picked; it holds that lease and releases it exactly once. */
async function attempt(
  p: ProxyInput,
  body: Validated["body"],
  group: ResolvedGroup,
  decision: RouteDecision,
  total: TotalTimer,
  attempts: number,
  fellBack: boolean,
): Promise<Attempt> {
  const { config, env, ctx } = p;
  const deployment = group.deployments[decision.backend] as ResolvedDeployment;
  const pipeline = config.pipelines.get(group.name) as HookPipeline;
  const stream = body.stream === true;
  const hookCtx: HookContext = { requestId: p.requestId, group: group.name, clientModel: body.model, upstreamModel: deployment.model, backendId: deployment.id, stream };

  let settle!: () => void;
  ctx.waitUntil(new Promise<void>((r) => (settle = r)));
  const release = (ended: LeaseOutcome, ttftMs?: number) => {
    // The gateway's own deadline is no verdict on the backend: what it cut short was abandoned.
    const outcome = total.expired && ended === "upstream-error" ? "client-abort" : ended;
    queueRelease(group.name, { lease: decision.lease, outcome, ...(ttftMs === undefined ? {} : { ttftMs }) }, env, ctx, config.releaseFlushMs);
    settle();
  };

  const upstreamBody: Record<string, unknown> = { ...body, model: deployment.model };
  for (const h of pipeline.request) h.onRequest?.(upstreamBody, hookCtx);
  // Serialised outside the fetch's try: a failure here is the request's, never the backend's.
  let payload: string;
  try {
    payload = JSON.stringify(upstreamBody);
  } catch (e) {
    release("client-abort");
    total.clear();
    throw badRequest(`request body cannot be serialised: ${(e as Error).message}`, null, "invalid_json");
  }
  // When the backend was picked: lets its logs (and bench:chaos) tell routing lag from routing.
  // Plain records, not Headers objects: the runtime copies them natively once, in fetch and Response.
  const headers: Record<string, string> = { "content-type": "application/json", "x-request-id": p.requestId, "x-kvgate-routed-at": String(decision.routedAt) };
  if (stream) headers.accept = "text/event-stream";
  if (deployment.apiKeyEnv) {
    const key = env[deployment.apiKeyEnv];
    if (typeof key === "string" && key !== "") headers.authorization = `Bearer ${key}`;
  }

  const abort = new AbortController();
  const onClientGone = () => abort.abort(new Error("client disconnected"));
  p.req.signal.addEventListener("abort", onClientGone);
  // Gone during the route call: the listener came too late to hear it.
  if (p.req.signal.aborted) onClientGone();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    abort.abort(new Error("upstream first-byte timeout"));
  }, group.firstByteTimeoutMs);
  total.watch(abort);

  const sentAt = performance.now();
  const overheadMs = sentAt - p.startedAt;
  const routing = routingHeaders(decision, deployment, overheadMs, p.requestId, attempts, fellBack ? group.name : null);
  let up: Response;
  try {
    up = await fetch(deployment.baseUrl + UPSTREAM_PATH[p.endpoint], { method: "POST", headers, body: payload, signal: abort.signal });
  } catch (e) {
    clearTimeout(timer);
    p.req.signal.removeEventListener("abort", onClientGone);
    if (p.req.signal.aborted) {
      release("client-abort");
      total.clear();
      throw new GatewayError(499, "invalid_request_error", "client disconnected", "client_closed_request");
    }
    release("upstream-error");
    const err = total.expired
      ? gatewayTimeout(`the request exceeded its total timeout of ${group.totalTimeoutMs} ms`)
      : timedOut
        ? gatewayTimeout(`backend ${deployment.id} sent no response headers within ${group.firstByteTimeoutMs} ms`)
        : badGateway(`backend ${deployment.id} could not be reached: ${(e as Error).message}`);
    return { failure: withHeaders(err.toResponse(), routing), cause: timedOut || total.expired ? "timeout" : "connect", retryAfterMs: null };
  }
  clearTimeout(timer);

  if (!up.ok || !up.body) {
    p.req.signal.removeEventListener("abort", onClientGone);
    const failed = up.status >= 500 || up.status === 401 || up.status === 403;
    release(up.status === 429 ? "rate-limited" : failed ? "upstream-error" : "ok");
    const retryAfterMs = parseRetryAfter(up.headers.get("retry-after"));
    const err = withHeaders(await upstreamError(up, deployment), routing);
    if (up.status >= 500) return { failure: err, cause: "5xx", retryAfterMs: up.status === 503 ? retryAfterMs : null };
    if (up.status === 429) return { failure: err, cause: "429", retryAfterMs };
    total.clear();
    return { response: err };
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
  if (!stream && transforms.length === 0 && pipeline.complete.length === 0) {
    // A non-streamed answer is whole when its headers arrive (the GPU work is done), and no hook
    // wants its bytes: hand the body over as it is and free the slot now.
    p.req.signal.removeEventListener("abort", onClientGone);
    total.clear();
    release("ok");
    return { response: new Response(up.body, { status: 200, headers: out }) };
  }
  const relayed = relay(up.body, {
    transforms,
    sse: stream,
    sentAt,
    now: () => performance.now(),
    nativePipe: () => new IdentityTransformStream(),
    clientGone: () => p.req.signal.aborted,
    ...(stream && group.streamIdleTimeoutMs ? { idleTimeoutMs: group.streamIdleTimeoutMs, onIdle: () => abort.abort(new Error("upstream stream stalled")) } : {}),
    onEnd: (summary) => {
      p.req.signal.removeEventListener("abort", onClientGone);
      total.clear();
      if (summary.outcome === "client-abort") abort.abort(new Error("client disconnected"));
      release(summary.outcome, summary.ttftMs ?? undefined);
      for (const h of pipeline.complete) ctx.waitUntil(Promise.resolve(h.onComplete?.(summary, hookCtx)));
    },
  });
  return { response: new Response(relayed, { status: 200, headers: out }) };
}

/** Retry-After in seconds or as an HTTP date, in ms; null when absent or unreadable. */
function parseRetryAfter(value: string | null): number | null {
  if (value === null) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

function withHeaders(res: Response, headers: Record<string, string>): Response {
  for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
  return res;
}

function routingHeaders(d: RouteDecision, dep: ResolvedDeployment, overheadMs: number, requestId: string, attempts: number, fallbackGroup: string | null): Record<string, string> {
  const h: Record<string, string> = {
    "x-kvgate-backend": dep.id,
    // A retried request says so; the routing reason of its last pick no longer explains it.
    "x-kvgate-reason": attempts > 1 || fallbackGroup ? "failover" : d.reason,
    "x-kvgate-attempts": String(attempts),
    "x-kvgate-prefix-blocks": `${d.matched}/${d.total}`,
    "x-kvgate-overhead-ms": overheadMs.toFixed(2),
    "x-request-id": requestId,
  };
  if (fallbackGroup) h["x-kvgate-group"] = fallbackGroup;
  return h;
}

const MAX_UPSTREAM_MESSAGE = 500;

/**
 * A client's mistake the upstream caught (4xx) keeps its status and message; the upstream's own
 * failure becomes a 502, and its rejection of the gateway's credentials never reads as the
 * client's fault.
 */
async function upstreamError(up: Response, dep: ResolvedDeployment): Promise<Response> {
  let message = "";
  try {
    const text = (await up.text()).slice(0, 64 * 1024);
    try {
      const j = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
      const m = typeof j.error === "object" ? j.error?.message : (j.error ?? j.message ?? j.detail);
      message = typeof m === "string" ? m : text;
    } catch {
      message = text;
    }
  } catch {
    // Body unreadable: the status says enough.
  }
  message = message.slice(0, MAX_UPSTREAM_MESSAGE);
  let err: GatewayError;
  if (up.status === 401 || up.status === 403) err = badGateway(`backend ${dep.id} rejected the gateway's credentials (HTTP ${up.status})`, "upstream_auth_error");
  else if (up.status >= 500 || up.status < 400) err = badGateway(`backend ${dep.id} failed with HTTP ${up.status}${message ? `: ${message}` : ""}`);
  else if (up.status === 429) err = new GatewayError(429, "rate_limit_error", `backend ${dep.id} is rate limiting: ${message}`, "upstream_rate_limited");
  else err = new GatewayError(up.status, "invalid_request_error", message || `backend ${dep.id} rejected the request (HTTP ${up.status})`, "upstream_rejected");
  return err.toResponse();
}

