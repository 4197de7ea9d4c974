import { classifyStatus, type Answer } from "../upstream/answer.ts";
import type { UpstreamErrorBody } from "../upstream/error-body.ts";

export type FailedAnswer = Exclude<Answer, { kind: "success" }>;

const NO_ENDPOINT: FailedAnswer = { kind: "backend-failure", why: "no-endpoint" };

/**
 * What an upstream's answer to a WebSocket handshake means when it did not switch protocols: a
 * 1xx or 2xx (a plain 200) says the server serves no WebSocket there, as a 404 naming no model
 * would — an endpoint the group's engines may all lack —, and so does a 403 with no body: an ASGI
 * server (vLLM's uvicorn) answers so when no WebSocket route serves the path (the app closes the
 * connection before accepting it, which the ASGI spec makes a bodiless 403), where a refused key
 * says why (vLLM's 401 body, an access proxy's page). The rest means what it means for any request
 * (src/upstream/answer.ts), by what its body said, its type (a 4xx that is a proxy's HTML page, as
 * nginx answers plain HTTP sent to its HTTPS port, is its refusal) and its Retry-After.
 */
export function classifyRefusedUpgrade(status: number, said: UpstreamErrorBody | null = null, retryAfter: string | null = null, bodyless = false, contentType: string | null = null): FailedAnswer {
  const answer = status < 300 || (status === 403 && bodyless) ? NO_ENDPOINT : classifyStatus(status, true, said, null, contentType, retryAfter);
  return answer.kind === "success" ? NO_ENDPOINT : answer;
}
