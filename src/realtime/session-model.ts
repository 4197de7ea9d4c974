import { isRecord } from "../fleet/merge-patch.ts";
import { realtimeEventSteering } from "../openai/engine-steering.ts";
import { badRequest, type GatewayError } from "../openai/errors.ts";
import { errorEvent } from "./error-event.ts";
import { eventType } from "./event-type.ts";

/**
 * A realtime session's model, pinned to its deployment's. The handshake's `?model=` is rewritten
 * to the deployment's model (workers/gateway/realtime-handshake.ts), but vLLM's /v1/realtime reads
 * no query string: it takes the model from the client's `session.update` (its top-level `model`)
 * and accepts only a name it serves. A client that names the model as the gateway knows it (a
 * group or an alias) would get `model_not_found`, then `model_not_validated` on every commit; and
 * a key limited to one group could name another model its backend's server also serves. So a
 * client's `session.update` (and `transcription_session.update`, OpenAI's beta transcription
 * session's) reaches the backend naming the deployment's model, at its top level and in its
 * `session` when that names one (OpenAI's layout).
 *
 * A session names other models beside its own, and a server of many (Speaches) loads whichever it
 * is named on demand: the one that transcribes the input audio
 * (`session.input_audio_transcription.model`; OpenAI's GA layout
 * `session.audio.input.transcription.model`) and the one that speaks (Speaches'
 * `session.speech_model`). A virtual key names none of them of its choosing (SessionPins): which
 * one the deployment's model is depends on the session. In a conversation (Speaches' default,
 * OpenAI's) it is the LLM, and the transcriber a whisper model apart: set there, the client's
 * speech would be sent to the LLM and never transcribed. So a virtual key's session names the
 * ones the server itself announced in the session.created it opened the session with
 * (announcedModels): a client that sends back the session it was given passes as it is, and
 * Speaches, which refuses a transcription object naming no model, applies it. In a transcription
 * session (the handshake's `intent=transcription`: Speaches then transcribes with the query's
 * model; vLLM's, whose transcription model is its top-level `model`) the deployment's model is the
 * transcriber.
 *
 * Which messages are read is decided without parsing the others (a voice client's audio appends
 * run to tens of KiB each), and without trusting where a message puts its type: the server's JSON
 * parser keeps the last of a type named twice, and decodes escapes (`session\u002eupdate`), so a
 * type read at a message's head or end (event-type.ts) could be told apart from the one the server
 * acts on. A message can only be a session.update, as the server parses it, when it holds the
 * words `session.update` or a \u escape (no other JSON escape makes a letter or a dot); base64
 * audio holds neither, even from an encoder that escapes its slashes (`\/`, as PHP's does).
 */

const TYPE = "session.update";

/** The events that update a session as session.update does: OpenAI's beta transcription session's too (its name holds TYPE). */
const SESSION_UPDATES: ReadonlySet<unknown> = new Set([TYPE, "transcription_session.update"]);

/** Where a session names the model that transcribes its input audio: OpenAI's beta layout, and its GA one. */
const TRANSCRIPTION_MODEL_AT: readonly (readonly string[])[] = [["input_audio_transcription"], ["audio", "input", "transcription"]];

/** The session's field naming the model that speaks its answers: Speaches' (OpenAI's sessions name a voice alone). */
const SPEECH_MODEL = "speech_model";

/**
 * Which models a client's session.update may name beside its session's own, which is always the
 * deployment's: "owner", the master key's — all (OpenAI's sessions name whisper-1 beside their
 * realtime model); a virtual key's, none of its choosing: each transcription and speech model it
 * names is set to the one its server announced (`announced`), or dropped where it announced none
 * (the server's default applying; the transcription object stays: naming one turns transcription
 * on) — but in a transcription session (`intent`: sessionIntent), whose transcription model is the
 * deployment's.
 */
export type SessionPins = "owner" | { intent: SessionIntent; announced: AnnouncedModels };

/**
 * The models a backend's server said it runs a session's transcription and speech on, in the
 * session.created it opened the session with (Speaches': its defaults, as a virtual key's
 * handshake names none); null where it named none.
 */
export interface AnnouncedModels {
  transcription: string | null;
  speech: string | null;
}

/** What a session whose server announced nothing (not yet, or not in its first message) is pinned to: nothing, each model dropped. */
export const NONE_ANNOUNCED: AnnouncedModels = Object.freeze({ transcription: null, speech: null });

const CREATED = "session.created";

/**
 * The models `message`, a backend's message, announces when it is the session.created a server
 * opens a session with: its session's transcription model (OpenAI's beta layout or its GA one:
 * TRANSCRIPTION_MODEL_AT) and speech model (Speaches'). Null when it is none: its type, as
 * event-type.ts reads it without parsing, another (its caller asks of one message only, but that
 * may be audio), more characters than `maxBytes` (a request body's bounds: what is parsed is
 * bounded), or not JSON.
 */
export function announcedModels(message: string, maxBytes: number): AnnouncedModels | null {
  if (message.length > maxBytes || eventType(message) !== CREATED) return null;
  let event: unknown;
  try {
    event = JSON.parse(message);
  } catch {
    return null;
  }
  if (!isRecord(event) || event.type !== CREATED || !isRecord(event.session)) return null;
  const session = event.session;
  const transcription = TRANSCRIPTION_MODEL_AT.map((path) => stringAt(session, [...path, "model"])).find((m) => m !== null) ?? null;
  return { transcription, speech: stringAt(session, [SPEECH_MODEL]) };
}

/** The string at `path` below `holder`; null when there is none. */
function stringAt(holder: Record<string, unknown>, path: readonly string[]): string | null {
  let v: unknown = holder;
  for (const key of path) v = isRecord(v) ? v[key] : undefined;
  return typeof v === "string" ? v : null;
}

/** What a realtime session is for, as the handshake's `intent` says (OpenAI's, Speaches'): a conversation unless it says transcription. */
export type SessionIntent = "conversation" | "transcription";

/**
 * The intent of the session the handshake's query `search` opens: its last `intent`, as Speaches'
 * parser (FastAPI's) reads a parameter named twice.
 */
export function sessionIntent(search: string): SessionIntent {
  return new URLSearchParams(search).getAll("intent").at(-1) === "transcription" ? "transcription" : "conversation";
}

/**
 * `message` as it goes to the backend: itself when it is not a session.update (byte for byte), a
 * session.update (or transcription_session.update) re-serialised with `model` (and `session.model`,
 * when its session names one) set to the deployment's `model`, and the other models its session
 * names as `pins` says; null when it may be one and is not JSON as this runtime reads it (Python's
 * parser takes `NaN` where JSON.parse does not), or cannot be serialised again: it must not reach
 * the backend unpinned. Its caller holds it to a request body's bounds first
 * (workers/gateway/body.ts sessionMessageRefusal): what is parsed here is not otherwise bounded.
 */
export function pinSessionModel(message: string, model: string, pins: SessionPins): string | null {
  if (!mayBeSessionUpdate(message)) return message;
  try {
    const event: unknown = JSON.parse(message);
    if (!isRecord(event) || !SESSION_UPDATES.has(event.type)) return message;
    const session = isRecord(event.session) ? pinnedSession(event.session, model, pins) : event.session;
    // Inside the try: serialising what was parsed may still throw (a RangeError on deep nesting).
    return JSON.stringify({ ...event, model, session });
  } catch {
    return null;
  }
}

/** `session` naming `model` as its own model where it names one, and its other models as `pins` says. */
function pinnedSession(session: Record<string, unknown>, model: string, pins: SessionPins): Record<string, unknown> {
  const own = modelAt(session, [], "model", model);
  if (pins === "owner") return own;
  const { intent, announced } = pins;
  // Never the deployment's model: that is the conversation's, or the transcriber's, never a voice.
  const spoken = modelAt(own, [], SPEECH_MODEL, announced.speech);
  const transcriber = transcriberFor(intent, model, announced);
  return TRANSCRIPTION_MODEL_AT.reduce((s, path) => modelAt(s, path, "model", transcriber), spoken);
}

/**
 * The transcription model a virtual key's session names: the deployment's `model` in a transcription
 * session (it is the transcriber), else the one its server announced; null: none, the server's
 * default applying. The handshake's query, before any announcement, reads it with NONE_ANNOUNCED.
 */
export function transcriberFor(intent: SessionIntent, model: string, announced: AnnouncedModels): string | null {
  return intent === "transcription" ? model : announced.transcription;
}

/**
 * `holder` with the `field` of the object at `path` below it set to `model`, or dropped (null),
 * when that object names one (a copy of each object on the way); itself otherwise. One that names
 * none (or a transcription turned off: null) is left as it is: the backend's own default is no
 * model the client chose.
 */
function modelAt(holder: Record<string, unknown>, path: readonly string[], field: string, model: string | null): Record<string, unknown> {
  const [key, ...rest] = path;
  if (key === undefined) {
    if (!(field in holder)) return holder;
    if (model !== null) return { ...holder, [field]: model };
    const kept = { ...holder };
    delete kept[field];
    return kept;
  }
  const inner = holder[key];
  return isRecord(inner) ? { ...holder, [key]: modelAt(inner, rest, field, model) } : holder;
}

/** Whether `message` may be a session.update as the server parses it: what pinSessionModel parses. */
export function mayBeSessionUpdate(message: string): boolean {
  return message.includes(TYPE) || message.includes("\\u");
}

const RESUME = "session.resume";

/**
 * Whether `message` may name an engine session as the server parses it (a session.update, or a
 * session.resume: told as a session.update is): what engineSessionRefusal parses. Its caller holds
 * it to a request body's bounds first, as a session.update (body.ts sessionMessageRefusal).
 */
export function mayNameEngineSession(message: string): boolean {
  return mayBeSessionUpdate(message) || message.includes(RESUME);
}

/**
 * The refusal of a virtual key's client event that names the engine's session (a session.update's
 * session id, a session.resume: engine-steering.ts realtimeEventSteering), or null. One that is not
 * JSON as this runtime reads it is refused as unreadable: the engine's Python parser takes NaN and
 * Infinity, so a session.resume holding one would reach it unread (pinSessionModel reads only what
 * may be a session.update). Read apart from pinSessionModel, only from a virtual key and only for
 * the few events mayNameEngineSession lets through (a voice client's audio is not parsed): a
 * session.update is parsed twice, bounded.
 */
export function engineSessionRefusal(message: string): GatewayError | null {
  if (!mayNameEngineSession(message)) return null;
  let event: unknown;
  try {
    event = JSON.parse(message);
  } catch {
    return UNREADABLE;
  }
  return isRecord(event) ? realtimeEventSteering(event) : null;
}

const UNREADABLE = badRequest("the gateway could not read this event as JSON: it was not passed on", null, "invalid_json");

/**
 * What the client is answered for a message pinSessionModel could not read, instead of its
 * backend's answer: an error event, as a server answers a message that is not JSON, naming the
 * message's `event_id` when its head or end does (event-type.ts clientEventId).
 */
export const unreadableEvent = (eventId: string | null): string => errorEvent(UNREADABLE, eventId);
