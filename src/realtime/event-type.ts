/**
 * A realtime message's event type, read from its head only. An event names its type first (the
 * SDKs' JSON.stringify of `{ type, … }`, vLLM's pydantic models; OpenAI and the simulator put an
 * `event_id` before it), and a session's messages can be large (an audio chunk's or delta's base64
 * runs to tens of KiB): no message is parsed to learn what it is.
 */

/** How far into a message its type is looked for. */
export const TYPE_WITHIN = 256;

/** The part of `message` its type is looked for in. */
export function headOf(message: string): string {
  return message.length > TYPE_WITHIN ? message.slice(0, TYPE_WITHIN) : message;
}

/** The first `"type": "…"` in a message's head: its event's type when the message is an event. */
const TYPE = /"type"\s*:\s*"([^"\\]*)"/;

/** `message`'s event type, by the first type its head names; null when it names none (not an event, or one not led by its type). */
export function eventType(message: string): string | null {
  return TYPE.exec(headOf(message))?.[1] ?? null;
}

/**
 * What a backend's server layer sends without its engine having made anything: the session's
 * setup (`session.created` on accept, as vLLM's server sends before it reads a message;
 * `session.updated`, `conversation.created`; a transcription session's `transcription_session.*`)
 * and its acknowledgements of what it is asked (`response.created`, the conversation's items,
 * speech marks, audio buffer events). A hung engine's server sends them as a healthy one's does.
 */
const SERVER_EVENTS = new Set([
  "session.created",
  "session.updated",
  "conversation.created",
  "input_audio_buffer.cleared",
  "input_audio_buffer.speech_started",
  "input_audio_buffer.speech_stopped",
  "input_audio_buffer.timeout_triggered",
  "response.created",
  "conversation.item.created",
  "conversation.item.added",
  "conversation.item.done",
  "conversation.item.retrieved",
  "conversation.item.truncated",
  "conversation.item.deleted",
  "rate_limits.updated",
]);

/**
 * What a backend's message says of its engine: `server` — its server layer's own (SERVER_EVENTS),
 * which says nothing of the engine; `committed` — `input_audio_buffer.committed`, the server
 * layer's whole answer to a commit that asks for no response (OpenAI's manual turns); `error` — an
 * event the server refused, an answer that is no output; `engine` — anything else (output, a
 * message of no known type, binary audio).
 */
export function backendEvent(message: string | ArrayBuffer): "server" | "committed" | "error" | "engine" {
  if (typeof message !== "string") return "engine";
  const type = eventType(message);
  if (type === null) return "engine";
  if (type === "error") return "error";
  if (type === "input_audio_buffer.committed") return "committed";
  return SERVER_EVENTS.has(type) || type.startsWith("transcription_session.") || type.startsWith("output_audio_buffer.") ? "server" : "engine";
}

/**
 * What a client's message asks of its backend: `response` — a `response.create`, which only the
 * engine's output (or an error) answers; `commit` — an `input_audio_buffer.commit`, which vLLM
 * answers with its transcription and OpenAI's server with `input_audio_buffer.committed` (its
 * response, if any, asked apart); null — nothing it owes an answer to.
 */
export function clientAsks(message: string): "response" | "commit" | null {
  const type = eventType(message);
  return type === "response.create" ? "response" : type === "input_audio_buffer.commit" ? "commit" : null;
}
