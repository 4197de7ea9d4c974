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
 * Whether a backend's message is one its server sends without asking its engine anything: the
 * session's setup (`session.created` on accept, as vLLM's server sends before it reads a message;
 * `session.updated`; a transcription session's `transcription_session.*`) or an `error` (an event
 * the server refused). Such a message does not say the engine answers: a hung engine's server
 * sends it as a healthy one's does.
 */
export function isSetupEvent(message: string): boolean {
  const type = eventType(message);
  return type !== null && (type === "session.created" || type === "session.updated" || type === "error" || type.startsWith("transcription_session."));
}

/**
 * Whether a client's message asks its backend for a response: `response.create`, or an
 * `input_audio_buffer.commit` (vLLM starts transcribing at a commit; OpenAI's server answers one).
 * Until the backend's next message, a response is owed: its silence is then the backend's.
 */
export function asksForResponse(message: string): boolean {
  const type = eventType(message);
  return type === "response.create" || type === "input_audio_buffer.commit";
}
