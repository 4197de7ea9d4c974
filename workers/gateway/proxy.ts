import type { ResolvedDeployment, ResolvedGroup } from "../../src/config/load.ts";
import type { HookContext, HookPipeline } from "../../src/hooks/types.ts";
import { badGateway, badRequest, GatewayError, gatewayTimeout, notFound, unavailable } from "../../src/openai/errors.ts";
import { ChatCompletionRequestSchema, CompletionRequestSchema, type ChatCompletionRequest, type CompletionRequest } from "../../src/openai/requests.ts";
import { chatFingerprint, completionFingerprint } from "../../src/prefix/fingerprint.ts";
import type { LeaseOutcome, RouteDecision } from "../../src/routing/group-router.ts";
import { relay } from "../../src/stream/relay.ts";
import { firstIssue } from "../../src/zod-issues.ts";
import type { LoadedConfig } from "../config.ts";
import type { Env, WaitUntil } from "../env.ts";
import { readJsonBody } from "./body.ts";
import { queueRelease, requeue, takePending } from "./lease-queue.ts";

export type Endpoint = "chat" | "completions";

const UPSTREAM_PATH: Record<Endpoint, string> = { chat: "/v1/chat/completions", completions: "/v1/completions" };

interface Validated {
  body: Record<string, unknown> & { model: string; stream?: boolean | null };
  chain: (g: ResolvedGroup) => number[];
}

function validate(endpoint: Endpoint, raw: unknown, config: LoadedConfig): Validated {
  if (endpoint === "chat") {
    const r = ChatCompletionRequestSchema.safeParse(raw);
    if (!r.success) throw issueError(r.error.issues);
    const body: ChatCompletionRequest = r.data;
    if (body.messages.length > config.limits.maxMessages) {
      throw badRequest(`messages has ${body.messages.length} items, more than the limit of ${config.limits.maxMessages}`, "messages");
    }
    return { body, chain: (g) => chatFingerprint(body, { blockChars: g.blockChars, maxBlocks: g.maxPrefixBlocks }) };
  }
  const r = CompletionRequestSchema.safeParse(raw);
  if (!r.success) throw issueError(r.error.issues);
  const body: CompletionRequest = r.data;
  return { body, chain: (g) => completionFingerprint(body, { blockChars: g.blockChars, maxBlocks: g.maxPrefixBlocks }) };
}

function issueError(issues: Parameters<typeof firstIssue>[0]): GatewayError {
  const { param, message } = firstIssue(issues);
  return badRequest(message, param || null);
}

export interface ProxyInput {
  endpoint: Endpoint;
  req: Request;
  env: Env;
  ctx: WaitUntil;
  config: LoadedConfig;
  requestId: string;
  startedAt: number;
}

/**
 * The request path: validate once, fingerprint, one route call to the group's Durable Object,
 * one upstream fetch, and the upstream body handed to the client as it arrives.
 */
export async function proxyCompletion(p: ProxyInput): Promise<Response> {
  const { config, env, ctx } = p;
  const raw = await readJsonBody(p.req, config.limits.maxBodyBytes);
  const { body, chain: fingerprint } = validate(p.endpoint, raw, config);
  const group = config.byModel.get(body.model);
  if (!group) throw notFound(`model "${body.model}" does not exist on this gateway (GET /v1/models lists them)`, "model_not_found");
  const chain = fingerprint(group);

  const released = takePending(group.name);
  let decision: RouteDecision | null;
  try {
    decision = await env.MODEL_GROUP.getByName(group.name).route(group.name, chain, released);
  } catch (e) {
    requeue(group.name, released);
    console.error(`kvgate: route call for ${group.name} failed: ${(e as Error).message}`);
    throw unavailable(`routing for model "${body.model}" is unavailable`, "routing_unavailable");
  }
  if (!decision) throw unavailable(`every backend of model "${body.model}" is at its in-flight limit`);

  const deployment = group.deployments[decision.backend] as ResolvedDeployment;
  const pipeline = config.pipelines.get(group.name) as HookPipeline;
  const stream = body.stream === true;
  const hookCtx: HookContext = { requestId: p.requestId, group: group.name, clientModel: body.model, upstreamModel: deployment.model, backendId: deployment.id, stream };

  // From here the lease is held: every path below releases it exactly once.
  let settle!: () => void;
  ctx.waitUntil(new Promise<void>((r) => (settle = r)));
  const release = (outcome: LeaseOutcome, ttftMs?: number) => {
    queueRelease(group.name, { lease: (decision as RouteDecision).lease, outcome, ...(ttftMs === undefined ? {} : { ttftMs }) }, env, ctx, config.releaseFlushMs);
    settle();
  };

  const upstreamBody: Record<string, unknown> = { ...body, model: deployment.model };
  for (const h of pipeline.request) h.onRequest?.(upstreamBody, hookCtx);
  const headers = new Headers({ "content-type": "application/json", "x-request-id": p.requestId });
  if (stream) headers.set("accept", "text/event-stream");
  if (deployment.apiKeyEnv) {
    const key = env[deployment.apiKeyEnv];
    if (typeof key === "string" && key !== "") headers.set("authorization", `Bearer ${key}`);
  }

  const abort = new AbortController();
  const onClientGone = () => abort.abort(new Error("client disconnected"));
  p.req.signal.addEventListener("abort", onClientGone);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    abort.abort(new Error("upstream first-byte timeout"));
  }, group.firstByteTimeoutMs);

  const sentAt = performance.now();
  const overheadMs = sentAt - p.startedAt;
  let up: Response;
  try {
    up = await fetch(deployment.baseUrl + UPSTREAM_PATH[p.endpoint], { method: "POST", headers, body: JSON.stringify(upstreamBody), signal: abort.signal });
  } catch (e) {
    clearTimeout(timer);
    p.req.signal.removeEventListener("abort", onClientGone);
    if (p.req.signal.aborted) {
      release("client-abort");
      throw new GatewayError(499, "invalid_request_error", "client disconnected", "client_closed_request");
    }
    release("upstream-error");
    if (timedOut) throw gatewayTimeout(`backend ${deployment.id} sent no response headers within ${group.firstByteTimeoutMs} ms`);
    throw badGateway(`backend ${deployment.id} could not be reached: ${(e as Error).message}`);
  }
  clearTimeout(timer);

  const routing = routingHeaders(decision, deployment, overheadMs, p.requestId);
  if (!up.ok || !up.body) {
    p.req.signal.removeEventListener("abort", onClientGone);
    release(up.status >= 500 || up.status === 401 || up.status === 403 ? "upstream-error" : "ok");
    const err = await upstreamError(up, deployment);
    for (const [k, v] of Object.entries(routing)) err.headers.set(k, v);
    return err;
  }

  const out = new Headers(routing);
  out.set("content-type", up.headers.get("content-type") ?? (stream ? "text/event-stream" : "application/json"));
  if (stream) out.set("cache-control", "no-cache");
  for (const h of pipeline.headers) h.onHeaders?.(out, hookCtx);

  const transforms = [];
  for (const h of pipeline.chunk) {
    const t = h.onChunk?.(hookCtx);
    if (t) transforms.push(t);
  }
  if (!stream && transforms.length === 0 && pipeline.complete.length === 0) {
    // A non-streamed answer is whole when its headers arrive (the GPU work is done), and no hook
    // wants its bytes: hand the body over as it is and free the slot now.
    p.req.signal.removeEventListener("abort", onClientGone);
    release("ok");
    return new Response(up.body, { status: 200, headers: out });
  }
  const relayed = relay(up.body, {
    transforms,
    sse: stream,
    sentAt,
    now: () => performance.now(),
    nativePipe: () => new IdentityTransformStream(),
    clientGone: () => p.req.signal.aborted,
    onEnd: (summary) => {
      p.req.signal.removeEventListener("abort", onClientGone);
      if (summary.outcome === "client-abort") abort.abort(new Error("client disconnected"));
      release(summary.outcome, summary.ttftMs ?? undefined);
      for (const h of pipeline.complete) ctx.waitUntil(Promise.resolve(h.onComplete?.(summary, hookCtx)));
    },
  });
  return new Response(relayed, { status: 200, headers: out });
}

function routingHeaders(d: RouteDecision, dep: ResolvedDeployment, overheadMs: number, requestId: string): Record<string, string> {
  return {
    "x-kvgate-backend": dep.id,
    "x-kvgate-reason": d.reason,
    "x-kvgate-prefix-blocks": `${d.matched}/${d.total}`,
    "x-kvgate-overhead-ms": overheadMs.toFixed(2),
    "x-request-id": requestId,
  };
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
  return errorResponse(err);
}

export function errorResponse(err: GatewayError): Response {
  const headers = new Headers({ "content-type": "application/json" });
  if (err.headers) for (const [k, v] of Object.entries(err.headers)) headers.set(k, v);
  return new Response(JSON.stringify(err.body()), { status: err.status, headers });
}
