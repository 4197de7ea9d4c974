import type { GatewayError } from "../openai/errors.ts";

/**
 * An OpenAI-style realtime `error` event: what the client is answered, in its backend's stead, for
 * a message the gateway does not pass on — the error a request would get, as the session's event.
 */
export function errorEvent(e: GatewayError): string {
  return JSON.stringify({ type: "error", error: { type: e.type, code: e.code, message: e.message, param: e.param } });
}

