import { join } from "./bytes.ts";
import { beforeNext, EVENT_HOLD_MAX_BYTES, eventEnds, eventFields, type Before } from "./sse-boundary.ts";

/** A body's first bytes, and when they came (the `now` clock's time). */
export interface FirstBytes {
  chunk: Uint8Array;
  at: number;
}

/**
 * Reads a body up to its first bytes, skipping empty chunks; null when it ends with none. The
 * reader is released: the rest of the body stays in it for the relay.
 *
 * `sse`: an event stream's first bytes are its first event's. SSE comments before it (a proxy
 * keeping a waiting request's connection alive) are no token: they are kept and go out with the
 * first event, and a stream of comments alone has no first bytes.
 *
 * `responses`: a Responses API stream's first bytes are its first event that is not an opening
 * (OPENING_EVENTS), the openings before it held and sent with it; a stream that ends after
 * openings alone has none, as one of comments alone: it answered nothing, and nothing of it
 * reached the client, so another backend may answer.
 */
export async function readFirstBytes(body: ReadableStream<Uint8Array>, now: () => number, sse = false, responses = false): Promise<FirstBytes | null> {
  const reader = body.getReader();
  const comments = new KeptComments();
  const openings = sse && responses ? new HeldOpenings() : null;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return null;
      if (value.byteLength === 0) continue;
      if (sse && (openings === null || openings.empty) && onlyComments(value)) {
        comments.keep(value);
        continue;
      }
      if (openings && !openings.push(value)) continue;
      return { chunk: comments.before(openings ? openings.joined() : value), at: now() };
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
 * A Responses API stream's events up to its first token, held by reference: they go out with it,
 * as comments do. Each event is read once, when its end comes. Past EVENT_HOLD_MAX_BYTES (openings
 * that echo a long `instructions` are a few hundred KiB at most) what is held goes out as the first
 * bytes: events cannot be dropped as comments are.
 */
class HeldOpenings {
  private held: Uint8Array[] = [];
  private bytes = 0;
  /** The parts of the event whose end has not come yet. */
  private event: Uint8Array[] = [];
  private before: Before = 0;

  get empty(): boolean {
    return this.bytes === 0;
  }

  /** Holds `chunk`; true when what is held now ends an event that is not an opening (a token), or is more than may be held. */
  push(chunk: Uint8Array): boolean {
    this.held.push(chunk);
    this.bytes += chunk.length;
    if (this.bytes > EVENT_HOLD_MAX_BYTES) return true;
    let start = 0;
    let token = false;
    for (const end of eventEnds(chunk, this.before)) {
      this.event.push(chunk.subarray(start, end));
      const event = join(this.event);
      this.event = [];
      start = end;
      if (!isOpening(event)) {
        token = true;
        break;
      }
    }
    if (!token && start < chunk.length) this.event.push(chunk.subarray(start));
    this.before = beforeNext(this.before, chunk);
    return token;
  }

  joined(): Uint8Array {
    return join(this.held);
  }
}

/** Whether an SSE event (its bytes up to its blank line) is no token: an opening, or nothing a client dispatches (comments, no data). */
function isOpening(event: Uint8Array): boolean {
  const { name, data } = eventFields(event);
  if (data === null) return true;
  const type = name ?? typeOfData(data);
  return type !== null && OPENING_EVENTS.has(type);
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
 * EVENT_HOLD_MAX_BYTES: an upstream that sends nothing else until the first-byte limit must not
 * fill the isolate's memory. Past it they are dropped, all of them, and a line end goes out in
 * their place, ending a comment line a dropped chunk may have left open: the event after it
 * stays an event. They carry nothing a client reads.
 */
class KeptComments {
  private chunks: Uint8Array[] = [];
  private bytes = 0;

  keep(chunk: Uint8Array): void {
    if (this.bytes + chunk.length > EVENT_HOLD_MAX_BYTES) {
      this.chunks = [LINE_END];
      this.bytes = LINE_END.length;
      return;
    }
    this.chunks.push(chunk);
    this.bytes += chunk.length;
  }

  before(chunk: Uint8Array): Uint8Array {
    if (this.chunks.length === 0) return chunk;
    this.chunks.push(chunk);
    return join(this.chunks);
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
