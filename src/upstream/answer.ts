import type { FailoverCause } from "../config/schema.ts";
import { GatewayError, outlastsSdkRetries, SHOULD_RETRY } from "../openai/errors.ts";
import type { UpstreamErrorBody } from "./error-body.ts";
import { parseRetryAfter } from "./retry.ts";

/**
 * What an upstream's answer means, decided in one place: for the client (what it is told), for
 * the backend's record (a verdict or none) and for failover (whether another backend might
 * answer). The attempt that got the answer only carries it out.
 */
export type Answer =
  /** A 200 with a body: relayed to the client. */
  | { kind: "success" }
  /**
   * The request's own fault (a 4xx the upstream judged): passed on; no verdict; not retried.
   * `notHeld`: a 404 for what a follow-up refers to (the stored response its previous_response_id
   * names), which says only that this backend does not hold it — another may
   * (workers/gateway/proxy.ts). Never of a request that refers to no stored response.
   * `tooLarge`: an engine's 500 that says the request's input is too large for it (INPUT_TOO_LARGE),
   * which the client gets as the 400 OpenAI answers it with.
   */
  | { kind: "rejected"; notHeld?: true; tooLarge?: true }
  /** Load, not failure: no verdict; retried after its Retry-After if that is short. */
  | { kind: "rate-limited" }
  /** The backend failed, or gave an answer no working OpenAI-compatible server gives. */
  | { kind: "backend-failure"; why: BackendFailure };

export type BackendFailure = "server-error" | "unavailable" | "redirect" | "no-content" | "encoding" | "html" | "not-served" | "no-endpoint" | "credentials" | "refused" | "status";

/**
 * The content codings the runtime's fetch decodes (workerd: gzip and br, named exactly so; it
 * keeps the header), and identity, which is none. The bytes of any other (deflate, zstd, a list of
 * several) come as they were sent, which no client and no usage reader can read.
 */
const DECODED_CODINGS = new Set(["gzip", "br", "identity"]);

/**
 * A page for a browser. No OpenAI-compatible API answers with one; a web server that is not the
 * API does (a proxy's login or block page, a web UI's catch-all route), with a 200 too: passed
 * on, the SDKs return the page as the completion, or end a stream with no event and no error.
 */
const HTML = /^\s*text\/html\b/i;

/**
 * `said`: what the upstream's error body said, when it was JSON (a 404's meaning turns on it).
 * `contentEncoding`, `contentType`, `retryAfter`: the answer's headers. The gateway asks for no
 * coding, so a working server sends none the runtime does not decode. `refersTo`: the id of a
 * stored object the request refers to (a Responses request's `previous_response_id`).
 */
export function classifyStatus(status: number, hasBody: boolean, said: UpstreamErrorBody | null = null, contentEncoding: string | null = null, contentType: string | null = null, retryAfter: string | null = null, refersTo: string | null = null): Answer {
  if (status === 200 && hasBody && contentEncoding && !DECODED_CODINGS.has(contentEncoding)) return { kind: "backend-failure", why: "encoding" };
  if (status === 200 && hasBody && contentType !== null && HTML.test(contentType)) return { kind: "backend-failure", why: "html" };
  if (status === 200) return hasBody ? { kind: "success" } : { kind: "backend-failure", why: "no-content" };
  // A 503 that says it is the server's state — when to come back (a queue or a limit full), or an
  // `unavailable_error` (a model still loading, as llama.cpp answers then) — no request causes. Any
  // other may be a crash the request caused, as a 500 may: a proxy in front of the engine (Envoy,
  // Istio, Knative) answers its crash with a plain 503.
  if (status === 503 && (retryAfter !== null || said?.type === "unavailable_error")) return { kind: "backend-failure", why: "unavailable" };
  // llama.cpp's "not supported": an endpoint it was not started to serve (/v1/embeddings without
  // --embeddings, /v1/rerank without --reranking), as a 404 for the path is below. Another 501 is
  // a server's error as any 5xx is (vLLM answers a NotImplementedError raised by a request so).
  if (status === 501 && said?.type === "not_supported_error") return { kind: "backend-failure", why: "no-endpoint" };
  // An engine's own JSON 500 that says the request's input does not fit the model, its batch or its
  // context: the request's, as its 400 for the same would be. Charged, a one-backend group's breaker
  // opened on an embeddings chunk too long, and every request after it was refused; retried, it
  // fails alike. Only a 500 (no proxy's 502, 503 or 504) whose JSON says so (said: never a page).
  if (status === 500 && saysInputTooLarge(said)) return { kind: "rejected", tooLarge: true };
  if (status >= 500) return { kind: "backend-failure", why: "server-error" };
  if (status === 429) return { kind: "rate-limited" };
  // The gateway asked for the model the deployment is configured with: a 404 that says the model is
  // unknown is the backend's (it serves another). One about what the request refers to is the
  // request's. Any other says the server has no such path: an endpoint it does not serve (a chat
  // model's vLLM has no /v1/embeddings; Ollama's router answers /v1/rerank with a plain-text page,
  // TGI's and TEI's with no body, an embeddings engine's /v1/chat/completions too), which every
  // backend of the group may answer alike, whatever path any client asks. A proxy's page for a
  // route it dropped (Traefik's once the engine stopped) is the same bytes: a group gone so is
  // served by its fallback groups (workers/gateway/proxy.ts), its breakers not charged.
  if (status === 404) {
    // notHeld only of a follow-up (refersTo: a Responses request's previous_response_id): on any
    // other request a 404 naming a parameter is the answer, not a stored response another lacks.
    if (notFoundIsRequests(said, refersTo)) return refersTo ? { kind: "rejected", notHeld: true } : { kind: "rejected" };
    return { kind: "backend-failure", why: saysModelUnknown(said) ? "not-served" : "no-endpoint" };
  }
  // The gateway's own key refused: what the engines answer a wrong or missing key with, a 401
  // (vLLM's and SGLang's --api-key middleware: {"error": "Unauthorized"}, 401; llama.cpp's
  // authentication_error, 401). The backend is misconfigured, not
  // the request: it is the backend's own, whatever another backend did.
  if (status === 401) return { kind: "backend-failure", why: "credentials" };
  // A 403 is what a proxy in front of the engine answers: a WAF rule on the request's body, an
  // ext_authz deny, Cloudflare Access without its service token. A proxy refusing what the request
  // holds refuses it on every backend behind it alike (workers/gateway/held-failure.ts). So is any
  // other 4xx that is a proxy's page, not an API's error (isPage): nginx's 400 for plain HTTP sent
  // to its HTTPS port or for a client certificate not sent (mTLS), a static site's 405 at a wrong
  // baseUrl, a 421. No request causes those. A limit on the request's size (REQUEST_SIZE: nginx's
  // 413 for client_max_body_size, a 414, a 431) is the request's by its nature, page or not.
  if (status === 403 || (status >= 400 && status < 500 && status !== 408 && !REQUEST_SIZE.has(status) && isPage(said, contentType))) return { kind: "backend-failure", why: "refused" };
  if (status >= 300 && status < 400) return { kind: "backend-failure", why: "redirect" };
  if (status === 204 || status === 205) return { kind: "backend-failure", why: "no-content" };
  // 408: the server gave up waiting for the request — the network or the server, not the prompt.
  if (status >= 400 && status !== 408) return { kind: "rejected" };
  return { kind: "backend-failure", why: "status" };
}

/**
 * What engines say, with a 500, of an input too large for the model, its batch or its context: the
 * request's, which no retry and no backend of the same model serves.
 * - llama.cpp's server, an embeddings or rerank input over its physical batch (ubatch, 512 by
 *   default), a server_error: "input (N tokens) is too large to process. increase the physical
 *   batch size (current batch size: M)" (tools/server/server-context.cpp); before, without the
 *   counts (ggml-org/llama.cpp#7389); llama-box's "…, please increase the physical batch size".
 * - llama.cpp's, an embeddings input over a slot's context: "input is larger than the max context
 *   size. skipping", a server_error (ggml-org/llama.cpp#10030); now a 400 exceed_context_size_error.
 * - vLLM's "The decoder prompt (length N) is longer than the maximum model length of M" and "This
 *   model's maximum context length is N tokens", and SGLang's "The input (N tokens) is longer than
 *   the model's context length (M tokens)": 400s of theirs, which a server wrapping them answers with
 *   a 500 (Xinference's {"detail": …}: langchain-ai/deepagents#468).
 * Not "exceeds the available context size": llama.cpp says it with a 400, and llama-box's 500
 * "decoding exceeds the available context size" (gpustack/gpustack#1359) is, as llama.cpp's "Input
 * prompt is too big compared to KV size" sent to every slot at once, a KV cache full of all the
 * requests in flight — the server's state. TGI's and TEI's "`inputs` must have less than N tokens"
 * is a 4xx, the request's already.
 */
const INPUT_TOO_LARGE: readonly RegExp[] = [
  /\bis too large to process\b.*\bphysical batch size\b/i,
  /\bis larger than the max context size\b/i,
  /\bis longer than the maximum model length\b/i,
  /\bmaximum context length is \d+ tokens\b/i,
  /\bis longer than the model's context length\b/i,
];

/** An error whose JSON message says the request's input is too large for the engine (INPUT_TOO_LARGE). */
function saysInputTooLarge(said: UpstreamErrorBody | null): boolean {
  const message = said?.message;
  return typeof message === "string" && INPUT_TOO_LARGE.some((phrase) => phrase.test(message));
}

/** 413, 414, 431: the request's body, URL or headers over a server's or a proxy's limit, on every backend behind it alike. */
const REQUEST_SIZE: ReadonlySet<number> = new Set([413, 414, 431]);

/**
 * An error that is a page, not an API's: its body held no JSON error (`said`) and its type is
 * HTML. The engines state a request's fault in JSON, whatever the status (vLLM, SGLang, llama.cpp,
 * Ollama; FastAPI's {"detail": …}), or, an axum server's (TGI's, mistral.rs's) refusal of a body
 * its types reject, in plain text ("Failed to deserialize the JSON body…", a 422 or a 400): the
 * request's, passed on. A web server or a proxy in front of them answers its own refusals with an
 * HTML page (nginx's, Cloudflare's). One of unknown type (none said, as a realtime handshake's
 * refusal and a stream's error event are judged) is taken as the engine's.
 */
function isPage(said: UpstreamErrorBody | null, contentType: string | null): boolean {
  return said === null && contentType !== null && HTML.test(contentType);
}

/** A failure that is no success: what a stream's error event (streamErrorAnswer) is judged as. */
export type NoSuccess = Exclude<Answer, { kind: "success" }>;

/**
 * What an error event a 200 stream sent in place of its first token means (nothing of the stream
 * reached the client): what the same request unstreamed would have been answered, the status its
 * error states. vLLM and SGLang state it as the error's `code` (400 for the request's fault, 500
 * for the engine's); others by a type or code an OpenAI-style error uses (ERROR_STATUS). One that
 * states none is the server's failure: no request is known to cause it.
 */
export function streamErrorAnswer(said: UpstreamErrorBody | null, refersTo: string | null): { status: number; answer: NoSuccess } {
  const code = said?.code;
  const stated = typeof code === "number" ? code : (ERROR_STATUS.get(String(code)) ?? ERROR_STATUS.get(String(said?.type)));
  const status = stated !== undefined && stated >= 400 && stated <= 599 ? stated : 500;
  const answer = classifyStatus(status, true, said, null, null, null, refersTo);
  return { status, answer: answer.kind === "success" ? { kind: "backend-failure", why: "server-error" } : answer };
}

/**
 * The status an error's type or code says, where it states no number: OpenAI's, vLLM's and
 * SGLang's (the Python exception's name), and TGI's `error_type`.
 */
const ERROR_STATUS: ReadonlyMap<string, number> = new Map([
  ["invalid_request_error", 400],
  ["BadRequestError", 400],
  ["context_length_exceeded", 400],
  ["invalid_prompt", 400],
  ["validation", 422],
  ["NotFoundError", 404],
  ["rate_limit_error", 429],
  ["rate_limit_exceeded", 429],
  ["overloaded", 429],
  ["server_error", 500],
  ["InternalServerError", 500],
  ["unavailable_error", 503],
  ["ServiceUnavailableError", 503],
]);

/**
 * A 404 about what the request refers to, not the model: it names another parameter (vLLM's
 * answer to a `previous_response_id` it did not store names `response_id`), or its message names
 * the stored response the request refers to (other vLLM versions give no `param`). vLLM keeps its
 * responses in memory: after a restart, or on any other backend, every one of them answers so.
 */
function notFoundIsRequests(said: UpstreamErrorBody | null, refersTo: string | null): boolean {
  if (said?.param && said.param !== "model") return true;
  return refersTo !== null && refersTo !== "" && said?.message?.includes(refersTo) === true;
}

/**
 * A 404 that says the model is unknown: it names `model` (its param, or OpenAI's code
 * `model_not_found`), or its message speaks of a model (vLLM's "The model `m` does not exist.",
 * Ollama's "model 'm' not found"). FastAPI's `{"detail":"Not Found"}` for a path no route serves,
 * or a proxy's page, says nothing of it.
 */
function saysModelUnknown(said: UpstreamErrorBody | null): boolean {
  return said !== null && (said.param === "model" || said.code === "model_not_found" || /\bmodel\b/i.test(said.message ?? ""));
}

/**
 * What a failed attempt met, as an operator reads it (`kvgate_attempt_failures_total`, the request
 * line's `failures`): finer than the failover cause, coarse enough to bound the metric's labels.
 * `connect`: no answer began (refused, reset); `timeout`: no first byte, or no whole answer, in
 * time; `stalled`: a stream went silent past streamIdleTimeoutMs; `broken-off`: an answer begun
 * and cut; `unavailable`: a 503 saying the server's state (a model loading, a full queue);
 * `server-error`: any other 5xx; `rate-limited`: a 429; `credentials`: a 401 (the engine refused
 * the gateway's key) or a 403 (a proxy in front of it refused the request: a WAF rule, an ext_authz
 * deny, an Access token missing or wrong), or another 4xx that is a proxy's page (a client
 * certificate not sent, plain HTTP to its HTTPS port); `not-served`: the model or endpoint not served;
 * `bad-answer`: what no OpenAI-compatible server sends; `unreachable`: none was made, the Worker
 * cannot reach the backend as configured (a secret or binding its deploy lacks), and routing passed
 * it over (workers/gateway/group-reach.ts). An object of a release before counts no kind it does
 * not know (src/metrics/backend-counters.ts), so a kind added is safe to roll out and back.
 */
export const FAILURE_KINDS = ["connect", "timeout", "stalled", "broken-off", "unavailable", "server-error", "rate-limited", "credentials", "not-served", "bad-answer", "unreachable"] as const;
export type FailureKind = (typeof FAILURE_KINDS)[number];

/** The kind of a backend failure an answer's status and headers showed. */
export function failureKind(why: BackendFailure): FailureKind {
  if (why === "no-endpoint") return "not-served";
  if (why === "refused") return "credentials";
  return why === "server-error" || why === "unavailable" || why === "credentials" || why === "not-served" ? why : "bad-answer";
}

/**
 * A 502 or 504 answered to the gateway: a proxy in front of the engine (a tunnel, nginx, an
 * ingress) got no answer from it, a request's and a realtime handshake's alike
 * (LeaseRelease.viaGateway: workers/gateway/held-failure.ts awaitsAnotherBackend, src/routing/silence.ts).
 */
export function isGatewaysFailure(status: number): boolean {
  return status === 502 || status === 504;
}

/** Which failover cause a backend's failure is (the group's `failover.on` lists the ones retried). */
export const FAILURE_CAUSE: FailoverCause = "5xx";

/**
 * A failure no request can cause: the backend's however the request is made (src/upstream/retry.ts
 * isServerSide). An endpoint not served is not: which endpoint is the client's choice, and a
 * group whose engines all lack it answers it alike on every backend (workers/gateway/held-failure.ts).
 * Nor is a proxy's refusal (a 403, another 4xx page): a firewall in front of the engines refuses a
 * prompt by its text on every backend alike. An engine's 401 is: its key is the gateway's, whatever the request holds.
 */
export function isBackendsOwn(why: BackendFailure): boolean {
  return why !== "server-error" && why !== "status" && why !== "no-endpoint" && why !== "refused";
}

const WHY: Record<BackendFailure, string> = {
  "server-error": "failed",
  unavailable: "is unavailable",
  redirect: "answered with a redirect, which the gateway does not follow",
  "no-content": "answered without a body",
  encoding: "answered in a content-encoding the gateway does not decode (it asks for none)",
  html: "answered with an HTML page, not an API's answer",
  "not-served": "does not serve this model",
  "no-endpoint": "does not serve this endpoint",
  credentials: "rejected the gateway's credentials",
  refused: "refused the request",
  status: "answered with a status no OpenAI-compatible server sends",
};

/**
 * The backend an error message names, as its caller may see it: by its id for the master key,
 * which owns the deployment; by its group for a virtual key, one tenant among others, to whom
 * which backend a prompt went says whether someone sent its prefix before, as the routing headers
 * would (workers/gateway/attempt.ts routingHeaders, master key only). Made where an error is, never
 * on a success; the request's log line keeps the id.
 */
export function backendAsSeen(backend: { id: string }, group: { name: string }, owner: boolean): string {
  return owner ? `backend ${backend.id}` : `a backend of group ${group.name}`;
}

/**
 * The error the client gets for an answer that was not a success. Only JSON an upstream sent in
 * OpenAI style reaches the client (bounded by parseUpstreamError); HTML, tracebacks and other
 * text are replaced by a message naming the backend (`backend`: as backendAsSeen names it).
 * `retryAfter`: the upstream's header, passed on with a 429 or 503. A proxy's refusal (a 403, or
 * another 4xx page) the client meets only when no backend of its group served the request, so it was the request's (held-failure.ts):
 * its status, which trying again does not change (`x-should-retry: false`). An engine's 401 is a
 * 502 as any backend's failure is, which the SDKs retry (another backend may hold the right key).
 */
export function clientError(status: number, answer: NoSuccess, upstream: UpstreamErrorBody | null, backend: string, retryAfter: string | null): GatewayError {
  const said = upstream?.message ?? null;
  const headers = retryAfter !== null && (status === 429 || status === 503) ? upstreamRetryHeaders(retryAfter) : undefined;
  switch (answer.kind) {
    case "rejected":
      // OpenAI's answer to an input over the model's context (a 400 context_length_exceeded), in
      // the engine's words; the SDKs retry no 400, and it says so to any other client.
      if (answer.tooLarge) return new GatewayError(400, "invalid_request_error", said ?? `${backend} refused the request's input as too large`, "context_length_exceeded", upstream?.param ?? null, { [SHOULD_RETRY]: "false" }, upstream?.extra);
      return new GatewayError(
        status,
        upstream?.type ?? "invalid_request_error",
        said ?? `${backend} rejected the request (HTTP ${status})`,
        upstream?.code ?? "upstream_rejected",
        upstream?.param ?? null,
        undefined,
        upstream?.extra,
      );
    case "rate-limited":
      return new GatewayError(429, "rate_limit_error", `${backend} is rate limiting${said ? `: ${said}` : ""}`, "upstream_rate_limited", null, headers);
    case "backend-failure": {
      // What the upstream said about the gateway's key, or a proxy about the request, is no business of the client's.
      if (answer.why === "refused") {
        // A 403 may be an Access token missing; another status's page, the way the gateway reaches
        // the engine (its scheme, its client certificate) or a limit of the proxy's on the request.
        // Its code is the one any upstream's rejection has.
        const [why, code] =
          status === 403
            ? ["a proxy in front of its server refused what the request holds, or the gateway's access token", "upstream_auth_error"]
            : ["a proxy in front of its server answered with a page of its own, refusing what the request holds or the way the gateway reaches the server", "upstream_rejected"];
        return new GatewayError(status, "upstream_error", `${backend} ${WHY.refused} (HTTP ${status}): ${why}`, code, null, { [SHOULD_RETRY]: "false" });
      }
      const credentials = answer.why === "credentials";
      const detail = said && !credentials ? `: ${said}` : "";
      return new GatewayError(502, "upstream_error", `${backend} ${WHY[answer.why]} (HTTP ${status})${detail}`, credentials ? "upstream_auth_error" : "upstream_error", null, headers);
    }
  }
}

/**
 * An upstream's Retry-After, passed on. One longer than the official SDKs wait for (failover
 * waited for none past retryAfterCapMs) says `x-should-retry: false`, as a key's own limit does:
 * else they send it twice more within seconds into the same refusal.
 */
function upstreamRetryHeaders(retryAfter: string): Record<string, string> {
  const ms = parseRetryAfter(retryAfter);
  return ms !== null && outlastsSdkRetries(ms / 1000) ? { "retry-after": retryAfter, [SHOULD_RETRY]: "false" } : { "retry-after": retryAfter };
}
