import { badRequest, type GatewayError } from "../openai/errors.ts";

/**
 * An OpenAI-style realtime `error` event: what the client is answered, in its backend's stead, for
 * a message the gateway does not pass on — the error a request would get, as the session's event.
 * `eventId`: the refused message's own `event_id` (event-type.ts clientEventId), named in the
 * error as OpenAI's server names the client event it refuses, so a client can tell which it was.
 */
export function errorEvent(e: GatewayError, eventId: string | null = null): string {
  const error = { type: e.type, code: e.code, message: e.message, param: e.param };
  return JSON.stringify({ type: "error", error: eventId === null ? error : { ...error, event_id: eventId } });
}

/**
 * What a client's binary message is answered: the realtime API's client events are JSON text, and
 * vLLM and vLLM-Omni read them with Starlette's receive_text(), which fails on a binary message and
 * ends the session (a close 1000, a transcription cut short with no transcription.done): passed on,
 * a client could end its backend's output unreported, and that end reads as the backend's own.
 */
export const BINARY_REFUSED = errorEvent(
  badRequest("the realtime API takes JSON events in text messages: this binary message was not passed on", null, "binary_message_unsupported"),
);
