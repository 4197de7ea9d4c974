/**
 * A realtime message's event type, read from its head or its end only. An event names its type
 * first (the SDKs' JSON.stringify of `{ type, … }`, vLLM's pydantic models; OpenAI and the
 * simulator put an `event_id` before it) or last (the OpenAI Python SDK's models serialised in
 * field order, as vLLM-Omni's full-duplex server sends them: `event_id, response, type`), and a
 * session's messages can be large (an audio chunk's or delta's base64 runs to tens of KiB): no
 * message is parsed to learn what it is.
 */

/** How far into a message, and back from its end, its type is looked for. */
export const TYPE_WITHIN = 256;

/** The part of `message` its type is looked for in first. */
export function headOf(message: string): string {
  return message.length > TYPE_WITHIN ? message.slice(0, TYPE_WITHIN) : message;
}

/** The first `"type": "…"` in a message's head: its event's type when the message is an event led by it. */
const TYPE = /"type"\s*:\s*"([^"\\]*)"/;

/**
 * A `"type": "…"` that closes the message: the outermost object's last field, so its event's type
 * (a nested object's closes with its own brace before the message's; one quoted in a string has
 * its quotes escaped).
 */
const TYPE_AT_END = /"type"\s*:\s*"([^"\\]*)"\s*\}\s*$/;

/**
 * `message`'s event type: the type it ends with, else the first type its head names (a head can
 * name a nested object's type before the event's own, which then comes last); null when it names
 * none (not an event, or one whose type is neither first nor last).
 */
export function eventType(message: string): string | null {
  const end = message.length > TYPE_WITHIN ? message.slice(-TYPE_WITHIN) : message;
  return TYPE_AT_END.exec(end)?.[1] ?? TYPE.exec(headOf(message))?.[1] ?? null;
}

/** An `event_id` that opens the message (its first field, or its second after its `type`): the outermost object's own. */
const EVENT_ID_FIRST = /^\s*\{\s*(?:"type"\s*:\s*"[^"\\]*"\s*,\s*)?"event_id"\s*:\s*"([^"\\]*)"/;
/** An `event_id` that closes the message: the outermost object's last field, as TYPE_AT_END reads a type. */
const EVENT_ID_AT_END = /"event_id"\s*:\s*"([^"\\]*)"\s*\}\s*$/;

/**
 * The `event_id` a client's message names, read from its head or its end only, where its SDK puts
 * it (first or beside its type in a JSON.stringify of `{ type, event_id, … }`, last in the Python
 * SDK's models dumped in field order); null when neither names one. What the gateway refuses may
 * be 32 MiB or too deep to parse: its id is read without parsing it.
 */
export function clientEventId(message: string): string | null {
  const end = message.length > TYPE_WITHIN ? message.slice(-TYPE_WITHIN) : message;
  return EVENT_ID_FIRST.exec(headOf(message))?.[1] ?? EVENT_ID_AT_END.exec(end)?.[1] ?? null;
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
 * A message of a backend's output, as its tokens are counted (src/realtime/usage.ts): `of` whose —
 * a response's (the Realtime API's `response.*`) or a transcription's of the input audio (vLLM's
 * `transcription.*`, OpenAI's `conversation.item.input_audio_transcription.*`, which runs beside a
 * response); `is` what — its `start` (a response's `response.created`; a transcription announces
 * none), a `delta` of it, or its `done`: its end, which reports its usage, if any, in `usage` (a
 * response's in `response.usage`).
 */
export interface OutputEvent {
  of: "response" | "transcription";
  is: "start" | "delta" | "done";
}

const RESPONSE_START: OutputEvent = { of: "response", is: "start" };
const RESPONSE_DELTA: OutputEvent = { of: "response", is: "delta" };
const RESPONSE_DONE: OutputEvent = { of: "response", is: "done" };
const TRANSCRIPTION_DELTA: OutputEvent = { of: "transcription", is: "delta" };
const TRANSCRIPTION_DONE: OutputEvent = { of: "transcription", is: "done" };

/** A response's deltas: text, audio, transcript, a call's arguments (either API's names). */
const RESPONSE_DELTA_TYPE = /^response\.[a-z_.]*delta$/;

/** OpenAI's transcription of a conversation's input audio; its end is `completed` (with usage) or `failed`. */
const INPUT_TRANSCRIPTION = "conversation.item.input_audio_transcription.";

/** The output event of `type` (a backend's message's eventType); null for any other. */
export function outputEvent(type: string | null): OutputEvent | null {
  if (type === null) return null;
  if (type === "response.done") return RESPONSE_DONE;
  if (type === "response.created") return RESPONSE_START;
  if (RESPONSE_DELTA_TYPE.test(type)) return RESPONSE_DELTA;
  if (type === "transcription.delta") return TRANSCRIPTION_DELTA;
  if (type === "transcription.done") return TRANSCRIPTION_DONE;
  if (!type.startsWith(INPUT_TRANSCRIPTION)) return null;
  const part = type.slice(INPUT_TRANSCRIPTION.length);
  return part === "delta" ? TRANSCRIPTION_DELTA : part === "completed" || part === "failed" ? TRANSCRIPTION_DONE : null;
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
