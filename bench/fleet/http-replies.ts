import type { IncomingMessage, ServerResponse } from "node:http";

/** Small helpers to read a request body and write JSON and OpenAI error replies. */

const ERROR_TYPES: Readonly<Record<number, string>> = {
  400: "BadRequestError",
  401: "AuthenticationError",
  403: "PermissionDeniedError",
  404: "NotFoundError",
  408: "RequestTimeoutError",
  409: "ConflictError",
  413: "RequestEntityTooLargeError",
  422: "UnprocessableEntityError",
  429: "RateLimitError",
  500: "InternalServerError",
  502: "BadGatewayError",
  503: "ServiceUnavailableError",
  504: "GatewayTimeoutError",
};

/** vLLM's error object: `{error: {message, type, param, code}}` with the HTTP status as code. */
export function openAIError(status: number, message: string, param: string | null = null): string {
  const type = ERROR_TYPES[status] ?? (status >= 500 ? "InternalServerError" : "BadRequestError");
  return JSON.stringify({ error: { message, type, param, code: status } });
}

export function sendJson(res: ServerResponse, status: number, body: string, headers: Readonly<Record<string, string>>): void {
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

export function sendError(
  res: ServerResponse,
  status: number,
  message: string,
  headers: Readonly<Record<string, string>>,
  param: string | null = null,
): void {
  sendJson(res, status, openAIError(status, message, param), headers);
}

/**
 * Calls back with the whole body, or with null if it exceeds `limit` bytes (the request is then
 * answered 413 by the caller). Callbacks rather than a promise: this is on every request's path.
 */
export function readBody(req: IncomingMessage, limit: number, done: (body: Buffer | null) => void): void {
  let first: Buffer | undefined;
  let rest: Buffer[] | undefined;
  let size = 0;
  let over = false;
  req.on("data", (chunk: Buffer) => {
    size += chunk.length;
    if (over) return;
    if (size > limit) {
      over = true;
      first = undefined;
      rest = undefined;
      return;
    }
    if (first === undefined) first = chunk;
    else (rest ??= [first]).push(chunk);
  });
  req.on("end", () => {
    if (over) done(null);
    else done(rest ? Buffer.concat(rest, size) : (first ?? Buffer.alloc(0)));
  });
}
