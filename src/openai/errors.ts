/** OpenAI-style error bodies: every failure the gateway answers has this shape. */

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "not_found_error"
  | "rate_limit_error"
  | "insufficient_quota"
  | "permission_error"
  | "server_error"
  | "upstream_error"
  | "timeout_error"
  | "service_unavailable";

/** A scalar an upstream's error may carry beside the four standard fields (llama.cpp's `n_ctx`). */
export type ErrorExtra = string | number | boolean | null;

export interface OpenAIErrorBody {
  /** `type` and `code` are the gateway's own, or an upstream's passed on (any string; a number for code). */
  error: { message: string; type: string; param: string | null; code: string | number | null; [extra: string]: ErrorExtra };
}

export class GatewayError extends Error {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | number | null;
  readonly headers: Record<string, string> | undefined;
  /** Further fields of an upstream's error, passed on beside the standard four. */
  readonly extra: Record<string, ErrorExtra> | undefined;

  constructor(
    status: number,
    type: ErrorType | (string & {}),
    message: string,
    code: string | number | null = null,
    param: string | null = null,
    headers?: Record<string, string>,
    extra?: Record<string, ErrorExtra>,
  ) {
    super(message);
    this.status = status;
    this.type = type;
    this.code = code;
    this.param = param;
    this.headers = headers;
    this.extra = extra;
  }

  body(): OpenAIErrorBody {
    return { error: { ...this.extra, message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  /** The error as the client receives it: its status, its headers, the OpenAI-shaped body. */
  toResponse(): Response {
    const headers: Record<string, string> = { "content-type": "application/json", ...this.headers };
    return coded(new Response(JSON.stringify(this.body()), { status: this.status, headers }), this.code === null ? null : String(this.code));
  }
}

/** Each error answer's code, for the request's log line: known without reading the body back. */
const codes = new WeakMap<Response, string>();

export function errorCodeOf(res: Response): string | null {
  return codes.get(res) ?? null;
}

function coded(res: Response, code: string | null): Response {
  if (code !== null) codes.set(res, code);
  return res;
}

/**
 * An error answer with another status or other headers. Rebuild one only through this: a new
 * Response is not in `codes`, and its request line would say `error_code: null`.
 */
export function retold(res: Response, init: ResponseInit): Response {
  return coded(new Response(res.body, init), errorCodeOf(res));
}

export const badRequest = (message: string, param: string | null = null, code = "invalid_request") =>
  new GatewayError(400, "invalid_request_error", message, code, param);
export const unauthorized = (message: string) => new GatewayError(401, "authentication_error", message, "invalid_api_key");
export const forbidden = (message: string, code: string) => new GatewayError(403, "permission_error", message, code);
/**
 * The header the official OpenAI SDKs (Node, Python) read before retrying an answer, which they do
 * for every 429 and 5xx by default: "false" stops them.
 */
export const SHOULD_RETRY = "x-should-retry";

/**
 * The longest Retry-After (seconds) the official OpenAI SDKs wait for: past it they retry a 429 as
 * if it named no wait, twice within seconds (Node's and Python's retry logic alike).
 */
const SDK_RETRY_AFTER_MAX_S = 60;

/** A wait of `seconds` that no retry of the official SDKs' outlasts: they retry within seconds instead. */
export const outlastsSdkRetries = (seconds: number): boolean => seconds > SDK_RETRY_AFTER_MAX_S;

/**
 * A limit of the caller's key: 429, and when trying again can succeed (none for a budget that never
 * renews). One that no retry of the SDKs' can outlast says `x-should-retry: false`, which they obey:
 * else they send it twice more into the same refusal and fail seconds later.
 */
export function overLimit(message: string, code: "rate_limit_exceeded" | "insufficient_quota", retryAfterMs: number | null): GatewayError {
  const seconds = retryAfterMs === null ? null : Math.max(1, Math.ceil(retryAfterMs / 1000));
  const headers: Record<string, string> = seconds === null ? {} : { "retry-after": String(seconds) };
  if (seconds === null || outlastsSdkRetries(seconds)) headers[SHOULD_RETRY] = "false";
  return new GatewayError(429, code === "insufficient_quota" ? "insufficient_quota" : "rate_limit_error", message, code, null, headers);
}
export const notFound = (message: string, code = "not_found") => new GatewayError(404, "not_found_error", message, code);
/** `what`: what is too large (a realtime session's event is bound as a request body is). */
export const tooLarge = (limit: number, what = "request body") =>
  new GatewayError(413, "invalid_request_error", `${what} exceeds the ${limit}-byte limit`, "body_too_large");
/** A body in a coding the gateway does not decode: 415, and Accept-Encoding says what it takes (RFC 7694). */
export const unsupportedEncoding = (encoding: string) =>
  new GatewayError(415, "invalid_request_error", `Content-Encoding ${encoding} is not supported: send the body unencoded (no Content-Encoding, or identity)`, "unsupported_content_encoding", null, { "accept-encoding": "identity" });
export const unavailable = (message: string, code = "no_healthy_backend") =>
  new GatewayError(503, "service_unavailable", message, code, null, { "retry-after": "1" });
export const badGateway = (message: string, code = "upstream_error") => new GatewayError(502, "upstream_error", message, code);
/** `allow` as the Allow header lists it: "POST", "GET, HEAD". */
export const methodNotAllowed = (path: string, allow: string) =>
  new GatewayError(405, "invalid_request_error", `use ${allow.split(", ").join(" or ")} for ${path}`, "method_not_allowed", null, { allow });
export const gatewayTimeout = (message: string) => new GatewayError(504, "timeout_error", message, "upstream_timeout");
/** The client left before its answer (nginx's 499): nobody reads it, but the request's line and metrics say so. */
export const clientGone = () => new GatewayError(499, "invalid_request_error", "client disconnected", "client_closed_request");

/**
 * A Responses stream's error event has a `sequence_number`, which the gateway does not know (its
 * fast path reads no event): one past any an upstream numbers, so that it orders last.
 */
const LAST_SEQUENCE_NUMBER = Number.MAX_SAFE_INTEGER;

/**
 * The SSE event a stream ends with when the upstream fails after bytes reached the client: a
 * chat or completions stream's is a data line with an `error`. A Responses API stream's is that
 * API's `error` event (`event: error`; `type`, `code`, `message`, `param` and `sequence_number` at
 * the top, as the Vercel AI SDK reads it) with the same `error` beside them, which is what the
 * official SDKs raise.
 */
export function sseErrorEvent(message: string, code: string, responses = false): string {
  const body: OpenAIErrorBody = { error: { message, type: "upstream_error", param: null, code } };
  if (!responses) return `data: ${JSON.stringify(body)}\n\n`;
  return `event: error\ndata: ${JSON.stringify({ type: "error", code, message, param: null, sequence_number: LAST_SEQUENCE_NUMBER, ...body })}\n\n`;
}
