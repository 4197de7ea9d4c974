import { holdsAt } from "./byte-match.ts";
import { concat } from "./bytes.ts";
import { GatheredBytes } from "./gathered-bytes.ts";
import { beforeNext, EVENT_HOLD_MAX_BYTES, eventEnds, eventFields, type Before } from "./sse-boundary.ts";

/** A body's first bytes, and when they came (the `now` clock's time). */
export interface FirstBytes {
  chunk: Uint8Array;
  at: number;
  /**
   * The first event's data, when that event is the server's error (errorData) and no token:
   * vLLM's and SGLang's stream generators answer an exception raised after the headers so, and
   * llama.cpp its slot's refusal (a prompt past its context) in an `error:` field. Nothing of the
   * stream has reached the client: its answer is that error, as the same request unstreamed would
   * have been answered.
   */
  error?: string;
}

/**
 * Reads a body up to its first bytes, skipping empty chunks; null when it ends with none. The
 * reader is released: the rest of the body stays in it for the relay.
 *
 * `sse`: an event stream's first bytes are its first event's. SSE comments before it (a proxy
 * keeping a waiting request's connection alive) are no token: they are kept and go out with the
 * first event, and a stream of comments alone has no first bytes. A first event that is the
 * server's error is no token either: its data comes back as `error`. Only a first chunk that may
 * open with one (mayOpenWithError, a byte check) is held until that event ends and parsed.
 *
 * `responses`: a Responses API stream's first bytes are its first event that is not an opening
 * (OPENING_EVENTS), the openings before it held and sent with it; a stream that ends after
 * openings alone has none, as one of comments alone: it answered nothing, and nothing of it
 * reached the client, so another backend may answer.
 */
export async function readFirstBytes(body: ReadableStream<Uint8Array>, now: () => number, sse = false, responses = false): Promise<FirstBytes | null> {
  const reader = body.getReader();
  const comments = new KeptComments();
  let held = sse && responses ? new HeldEvents(isOpening) : null;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      // A chat stream's first event held for the check that never ended: what came is the answer's, as it would be unchecked.
      if (done) return !responses && held?.unended ? { chunk: comments.before(held.joined()), at: now() } : null;
      if (value.byteLength === 0) continue;
      if (sse && (held === null || held.empty) && onlyComments(value)) {
        comments.keep(value);
        continue;
      }
      if (sse && held === null && mayOpenWithError(value)) held = new HeldEvents(dispatchesNothing, ERROR_EVENT_HOLD_MAX_BYTES);
      if (held === null) return { chunk: comments.before(value), at: now() };
      if (!held.push(value)) continue;
      const first: FirstBytes = { chunk: comments.before(held.joined()), at: now() };
      const error = held.token !== null && includes(held.token, ERROR, 0, held.token.length) ? errorData(held.token) : null;
      if (error !== null) first.error = error;
      return first;
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * The Responses API's events that carry no token: vLLM sends response.created and
 * response.in_progress as soon as it takes the request, before the engine has begun it (it may
 * wait in its queue for minutes, or on an engine that hangs); response.queued is OpenAI's for a
 * request waiting its turn.
 */
const OPENING_EVENTS: ReadonlySet<string> = new Set(["response.created", "response.in_progress", "response.queued"]);

/**
 * A stream's events up to its first token: they go out with it, as comments do. Each event is
 * read once, when its end comes. Past EVENT_HOLD_MAX_BYTES (Responses openings that echo a long
 * `instructions` are a few hundred KiB at most) what is held goes out as the first bytes: events
 * cannot be dropped as comments are. `opens`: whether an event is no token (a Responses API
 * opening, an event with no data); `maxBytes`, what may be held. Held as copies (GatheredBytes),
 * not by reference: an upstream that drips a byte per chunk would have each byte hold a 4 KiB
 * store of the runtime's, 256 MiB for a chat stream's 64 KiB.
 */
class HeldEvents {
  private held = new GatheredBytes();
  /** Where, in what is held, the event whose end has not come yet begins. */
  private eventStart = 0;
  private before: Before = 0;
  /** The first event that is not an opening, once its end has come. */
  token: Uint8Array | null = null;

  private readonly opens: (event: Uint8Array) => boolean;
  private readonly maxBytes: number;

  constructor(opens: (event: Uint8Array) => boolean, maxBytes = EVENT_HOLD_MAX_BYTES) {
    this.opens = opens;
    this.maxBytes = maxBytes;
  }

  get empty(): boolean {
    return this.held.length === 0;
  }

  /** Whether bytes of an event that has not ended are held (a server that omits the last blank line). */
  get unended(): boolean {
    return this.held.length > this.eventStart;
  }

  /** Holds `chunk`; true when what is held now ends an event that is not an opening (a token), or is more than may be held. */
  push(chunk: Uint8Array): boolean {
    const offset = this.held.length;
    this.held.push(chunk);
    if (this.held.length > this.maxBytes) return true;
    for (const end of eventEnds(chunk, this.before)) {
      // A view of what is held: read now, before the next push may move it.
      const event = this.held.bytes().subarray(this.eventStart, offset + end);
      this.eventStart = offset + end;
      if (!this.opens(event)) {
        this.token = event;
        break;
      }
    }
    this.before = beforeNext(this.before, chunk);
    return this.token !== null;
  }

  joined(): Uint8Array {
    return this.held.bytes();
  }
}

/**
 * Whether an SSE event (its bytes up to its blank line) is no token: an opening, or nothing a
 * client dispatches (comments, no data). An `error:` field is no opening: it is llama.cpp's error,
 * which errorData reads.
 */
function isOpening(event: Uint8Array): boolean {
  const { name, data, error } = eventFields(event);
  if (data === null) return error === null;
  const type = name ?? typeOfData(data);
  return type !== null && OPENING_EVENTS.has(type);
}

/** A chat stream's event that no client dispatches (comments, no data) and no `error:` field: no token, as isOpening has it. */
function dispatchesNothing(event: Uint8Array): boolean {
  const { data, error } = eventFields(event);
  return data === null && error === null;
}

/**
 * Whether a stream's first chunk may open with an error event: its first data line holds the bytes
 * `"error"` (vLLM's, SGLang's and TGI's error events have an `error` field, or vLLM's older
 * `"object": "error"`), or has not ended in the chunk; or an `error:` field line comes before any
 * data line (llama.cpp's llama-server of 2024 to mid-2025 writes its error as that field, its JSON
 * the value, and no data line); or the chunk ends before either could be read (a line not ended, as
 * `dat` or `err`, or whole lines that were neither, as `event: error`: an upstream that drips bytes,
 * a proxy that re-chunks them; handed on, an error was a 200 stream). Most first events are tokens
 * and fail this at a few native searches, before any decoding or JSON.parse; a held event that
 * ends as a token costs what holding it took.
 */
function mayOpenWithError(chunk: Uint8Array): boolean {
  let line = 0;
  while (line < chunk.length) {
    const end = lineEnd(chunk, line);
    if (holdsAt(chunk, line, DATA)) return end < 0 || includes(chunk, QUOTED_ERROR, line, end);
    if (holdsAt(chunk, line, ERROR_FIELD) || end < 0) return true;
    line = end + 1;
  }
  return true;
}

/** Where the line that begins at `from` ends (its CR or LF), or -1; a CR is looked for only before the first LF, not through a large chunk. */
function lineEnd(chunk: Uint8Array, from: number): number {
  const lf = chunk.indexOf(LF, from);
  if (lf < 0) return chunk.indexOf(CR, from);
  const cr = chunk.subarray(from, lf).indexOf(CR);
  return cr < 0 ? lf : from + cr;
}

/**
 * An event's data when the event is a server's error instead of its answer: chat's
 * `{"error": …}` (vLLM, SGLang, llama.cpp's later builds, TGI) or vLLM's older
 * `{"object": "error", …}`; the Responses API's `error` event or `response.failed`; or, in an event
 * with no data, the value of its `error:` field (llama.cpp's earlier builds:
 * `{"code": 400, "message": …, "type": "exceed_context_size_error", …}`, the fields an error body has
 * under `error`). null for anything else.
 */
function errorData(event: Uint8Array): string | null {
  const { name, data, error } = eventFields(event);
  if (data === null) return error;
  if (name === "error" || name === "response.failed") return data;
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    return null;
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return null;
  const fields = json as Record<string, unknown>;
  const isError = (fields.error !== undefined && fields.error !== null) || fields.object === "error" || fields.type === "error" || fields.type === "response.failed";
  return isError ? data : null;
}

/**
 * The most of a chat stream's first event held to see whether it is an error (a server's error
 * event is a message of a few KiB at most): past it, what is held goes on unchecked, so an
 * upstream that drips a first event a byte at a time costs a bounded number of held pieces.
 */
const ERROR_EVENT_HOLD_MAX_BYTES = 64 * 1024;

const encoder = new TextEncoder();
const DATA = encoder.encode("data:");
const QUOTED_ERROR = encoder.encode('"error"');
const ERROR_FIELD = encoder.encode("error:");
/** In every error event's bytes: its `error` field, type or name. */
const ERROR = encoder.encode("error");

/** Whether `needle` occurs in `bytes` within [from, to). */
function includes(bytes: Uint8Array, needle: Uint8Array, from: number, to: number): boolean {
  for (let i = bytes.indexOf(needle[0] as number, from); i >= 0 && i + needle.length <= to; i = bytes.indexOf(needle[0] as number, i + 1)) {
    if (holdsAt(bytes, i, needle)) return true;
  }
  return false;
}

/** The `type` of an event's JSON data (a server that writes no `event:` line names it there), or null. */
function typeOfData(data: string): string | null {
  try {
    const json: unknown = JSON.parse(data);
    return typeof json === "object" && json !== null && "type" in json && typeof json.type === "string" ? json.type : null;
  } catch {
    return null;
  }
}

/**
 * The comments read before the first event, joined once when it comes. Held up to
 * EVENT_HOLD_MAX_BYTES, as copies (GatheredBytes: a byte per chunk is no 4 KiB store each): an
 * upstream that sends nothing else until the first-byte limit must not fill the isolate's memory.
 * Past it they are dropped, all of them, and a line end goes out in their place, ending a comment
 * line a dropped chunk may have left open: the event after it stays an event. They carry nothing
 * a client reads.
 */
class KeptComments {
  private kept = new GatheredBytes();

  keep(chunk: Uint8Array): void {
    if (this.kept.length + chunk.length > EVENT_HOLD_MAX_BYTES) {
      this.kept.clear();
      this.kept.push(LINE_END);
      return;
    }
    this.kept.push(chunk);
  }

  before(chunk: Uint8Array): Uint8Array {
    return this.kept.length === 0 ? chunk : concat(this.kept.bytes(), chunk);
  }
}

const COLON = 0x3a;
const LF = 0x0a;
const CR = 0x0d;
const LINE_END = new Uint8Array([LF]);

/** Every line of `chunk` an SSE comment (`:` first) or blank: it dispatches no event. */
function onlyComments(chunk: Uint8Array): boolean {
  // The common case, a chunk that opens with `data:` or `event:`, is decided at its first byte.
  if (chunk[0] !== COLON) return false;
  let lineStart = true;
  for (let i = 0; i < chunk.length; i++) {
    const c = chunk[i] as number;
    if (c === LF || c === CR) lineStart = true;
    else if (lineStart) {
      if (c !== COLON) return false;
      lineStart = false;
    }
  }
  return true;
}
