import { GatewayError } from "../../src/openai/errors.ts";

/**
 * The answer to an error thrown while serving a request: its own OpenAI-style error, or a 500
 * whose cause goes to the log only (a stack names the gateway's files, never a client's business).
 */
export function errorAnswer(err: unknown, requestId: string | undefined): Response {
  return withRequestId(asGatewayError(err).toResponse(), requestId);
}

/** `err` as the client is told it (errorAnswer), for a caller that adds headers of its own. */
export function asGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  console.error(`kvgate: unhandled error: ${err instanceof Error ? err.stack : String(err)}`);
  return new GatewayError(500, "server_error", "internal gateway error", "internal_error");
}

function withRequestId(res: Response, requestId: string | undefined): Response {
  if (requestId) res.headers.set("x-request-id", requestId);
  return res;
}
