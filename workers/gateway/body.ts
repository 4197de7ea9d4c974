import { BODY_SHAPE, isInexactNumber, scanBody, shapeExcess, type InexactField, type ShapeBounds, type ShapeExcess } from "../../src/openai/body-shape.ts";
import { badRequest, clientGone, tooLarge, unsupportedEncoding, type GatewayError } from "../../src/openai/errors.ts";
import { GatheredBytes } from "../../src/stream/gathered-bytes.ts";

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/**
 * Reads a JSON body, refusing more than `limit` bytes without buffering past it, and a shape past
 * `bounds` (the client API's unless a route's own bodies are larger by nature: the admin fleet's).
 */
export async function readJsonBody(req: Request, limit: number, bounds: ShapeBounds = BODY_SHAPE): Promise<unknown> {
  return (await readSizedJsonBody(req, limit, bounds)).json;
}

/** A body as read: its JSON, its size, and — for one holding a number JSON.parse changes — that JSON as the client wrote it. */
export interface ReadBody {
  json: unknown;
  bytes: number;
  /**
   * The body with every number JSON.parse would change kept as the text the client wrote (an
   * integer past 2^53, a number past a double's range; see isInexactNumber), to be sent upstream
   * in place of `json` once `json` passed validation; null for a body with none (nearly every one).
   * Validation reads `json` alone, so a misplaced such number is refused as it was.
   */
  exact: Record<string, unknown> | null;
}

/** readJsonBody, with the body's size in bytes. */
export async function readSizedJsonBody(req: Request, limit: number, bounds: ShapeBounds = BODY_SHAPE): Promise<ReadBody> {
  const bytes = await readBytes(req, limit);
  if (bytes === null) throw emptyBody();
  return parseJson(bytes, bounds);
}

/**
 * For a route where no body means defaults: undefined for a request with none — no body, no
 * bytes, however it was framed (Content-Length: 0 or an empty chunked body), or only whitespace.
 */
export async function readOptionalJsonBody(req: Request, limit: number): Promise<unknown> {
  const bytes = await readBytes(req, limit);
  return bytes === null || isBlank(bytes) ? undefined : parseJson(bytes, BODY_SHAPE).json;
}

/** The body's bytes, at most `limit` of them (a 413 past it); null for a request without a body. */
async function readBytes(req: Request, limit: number): Promise<Uint8Array | null> {
  refuseEncoded(req.headers.get("content-encoding"));
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) throw tooLarge(limit);
  if (!req.body) return null;
  // A declared length within the limit is read in one native call; only a chunked body of
  // unknown length is counted as it streams in.
  const bytes = declared !== null ? new Uint8Array(await fromClient(req.arrayBuffer())) : await readCounted(req.body, limit);
  if (bytes.length > limit) throw tooLarge(limit);
  return bytes;
}

/** JSON's whitespace alone (RFC 8259: space, tab, LF, CR), as parseJson's trim() would find it empty. */
function isBlank(bytes: Uint8Array): boolean {
  return bytes.every((b) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d);
}

function emptyBody(): GatewayError {
  return badRequest("request body is empty", null, "invalid_json");
}

/**
 * The runtime hands a request's body over as it came, still compressed (workerd does not decode
 * it): read as text, a gzip body would be refused as invalid UTF-8, which says nothing of why.
 */
function refuseEncoded(encoding: string | null): void {
  if (encoding === null) return;
  const codings = encoding.split(",").map((c) => c.trim().toLowerCase());
  if (codings.some((c) => c !== "" && c !== "identity")) throw unsupportedEncoding(encoding.trim());
}

/**
 * The most of a refused body read and dropped so that its answer reaches the client
 * (discardUnread); the longest wait for its next bytes, and for all of it.
 */
export const DISCARD_BYTES = 64 * 1024 * 1024;
const DISCARD_IDLE_MS = 10_000;
const DISCARD_MS = 60_000;

/**
 * workerd closes a connection whose request body was left unread, and a client still sending it
 * (an SDK uploads the whole body before it reads the answer) meets a broken pipe instead of the
 * answer — then retries the same body. An answer given before its body was read (a 401, a 413 by
 * the declared length) therefore waits until the body has come (discardRest).
 */
export async function discardUnread(req: Request): Promise<void> {
  if (req.body === null || req.bodyUsed || Number(req.headers.get("content-length") ?? 0) > DISCARD_BYTES) return;
  await discardRest(req.body.getReader());
}

/**
 * Reads and drops the rest of a request's body, so that an answer given before it was all read
 * reaches a client still sending it: up to DISCARD_BYTES, while bytes keep coming
 * (DISCARD_IDLE_MS) and for DISCARD_MS at most. A slow uplink's upload is waited for, a client
 * with no key cannot hold the request open a byte at a time. Past any of these the body is
 * cancelled, and the connection cut as before. Never throws: a client that left has no one to answer.
 */
async function discardRest(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
  const until = Date.now() + DISCARD_MS;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    for (let left = DISCARD_BYTES; left > 0; ) {
      const waitMs = Math.min(DISCARD_IDLE_MS, until - Date.now());
      if (waitMs <= 0) break;
      const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), waitMs)));
      const next = await Promise.race([reader.read(), late]);
      clearTimeout(timer);
      if (next === null) break;
      if (next.done) return;
      left -= next.value.length;
    }
    await reader.cancel();
  } catch {
    // The client left: there is no one to answer.
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A read of the request's body. It fails only when the client's connection ended in the middle of
 * it (the runtime's "Network connection lost": a client that closed its socket mid-upload, curl -m,
 * a closed tab): no one is left to answer, and it is no fault of the gateway's — a 499
 * client_closed_request, as a client that leaves later gets, not a 500 logged as an unhandled error.
 */
async function fromClient<T>(read: Promise<T>): Promise<T> {
  try {
    return await read;
  } catch {
    throw clientGone();
  }
}

/**
 * A chunked body, counted as it streams in, each read copied into one buffer and dropped
 * (GatheredBytes). Read a chunk at a time, a client that sends a byte per HTTP chunk got a 4 KiB
 * store of the runtime's for each, and kept by reference they held 4 KiB a byte: 100,000 of them
 * grew workerd by ~500 MiB, where the count said 100 KB.
 */
async function readCounted(body: ReadableStream<Uint8Array>, limit: number): Promise<Uint8Array> {
  const reads = bodyReads(body);
  const read = new GatheredBytes(limit);
  for (;;) {
    const { done, value } = await fromClient(reads.next());
    if (done) return read.bytes();
    if (read.length + value.length > limit) {
      // The rest of a chunked upload is still coming: left unread, the client would meet a broken pipe, not this 413.
      // What was counted (up to maxBodyBytes) is dropped first, not held for the discard's up to DISCARD_MS.
      read.clear();
      await discardRest(reads.rest());
      throw tooLarge(limit);
    }
    read.push(value);
  }
}

/** What a read of a chunked body waits to fill (readAtLeast): the runtime gathers the HTTP chunks that came into it. */
const BODY_READ_BYTES = 64 * 1024;

/** A BYOB reader, with workerd's readAtLeast where there is one (Node's, in tests, has none). */
type FillingReader = ReadableStreamBYOBReader & { readAtLeast?: (min: number, view: Uint8Array) => Promise<ReadableStreamReadResult<Uint8Array>> };

interface BodyReads {
  next(): Promise<ReadableStreamReadResult<Uint8Array>>;
  /** A reader of what is left unread, for discardRest. */
  rest(): ReadableStreamDefaultReader<Uint8Array>;
}

/**
 * Reads of a request body. In workerd each fills a buffer of BODY_READ_BYTES of its own (a BYOB
 * reader's readAtLeast) from as many HTTP chunks as it takes, so a body sent a byte per chunk costs
 * neither a runtime store nor a JavaScript read per byte; the reads' garbage is the body's size.
 * Where there is no readAtLeast (Node's Request, in tests), a chunk at a time.
 */
function bodyReads(body: ReadableStream<Uint8Array>): BodyReads {
  let byob: FillingReader | null = null;
  try {
    byob = body.getReader({ mode: "byob" }) as FillingReader;
  } catch {
    // No byte stream: read a chunk at a time.
  }
  const readAtLeast = byob?.readAtLeast?.bind(byob);
  if (byob !== null && readAtLeast !== undefined) {
    const reader = byob;
    return {
      next: () => readAtLeast(BODY_READ_BYTES, new Uint8Array(BODY_READ_BYTES)),
      rest: () => {
        reader.releaseLock();
        return body.getReader();
      },
    };
  }
  byob?.releaseLock();
  const reader = body.getReader();
  return { next: () => reader.read(), rest: () => reader };
}

function parseJson(bytes: Uint8Array, bounds: ShapeBounds): ReadBody {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw badRequest("request body is not valid UTF-8", null, "invalid_json");
  }
  if (text.trim() === "") throw emptyBody();
  // Counted before parsing: a body over a bound costs a read of its text, not a parse.
  const scan = scanBody(text, bounds);
  if (scan.excess) throw shapeError(scan.excess, bounds);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw badRequest(`request body is not valid JSON: ${(e as Error).message}`, null, "invalid_json");
  }
  if (scan.inexactFields.length === 0 || typeof json !== "object" || json === null || Array.isArray(json)) return { json, exact: null, bytes: bytes.length };
  return { json, exact: keptExact(text, json as Record<string, unknown>, scan.inexactFields), bytes: bytes.length };
}

/**
 * The most values the fields holding an inexact number may have together: only they are parsed a
 * second time, with a reviver V8 calls for every value with its source text. Timed in Node 22
 * (median of 9, a loaded 2-core machine) it costs 0.4-0.7 µs a value, twenty to fifty times a plain
 * parse: 131,072 values take 86 ms, twice as many 180 ms. 131,072 is BODY_SHAPE.maxNodes, so any
 * field of objects and keys within that bound passes (1,024 tools of ten int64 parameters each,
 * one bound past 2^63, are 71,681 values and 34 ms); a seed beside 2 million numbers in another
 * field is one value. Counted over every such field of a body, not each alone: spread over 127
 * fields, 16,384 values apiece were the 2 million values again.
 */
export const MAX_EXACT_VALUES = 131_072;

/**
 * The body with its inexact numbers as the client wrote them: `json` with each top-level field
 * that holds one parsed again from its own text, keeping them; every other field is json's own.
 */
function keptExact(text: string, json: Record<string, unknown>, fields: readonly InexactField[]): Record<string, unknown> {
  const exact = { ...json };
  // Validation drops a body's own __proto__ key; nested ones in values it does not walk (a tool's
  // schema) it passes on, and so does this.
  delete exact.__proto__;
  let budget = MAX_EXACT_VALUES;
  for (const { field, start, end } of fields) {
    if (field === "__proto__") continue;
    budget -= valuesUpTo(json[field], budget);
    if (budget < 0) throw inexactPastBudget(field);
    exact[field] = JSON.parse(text.slice(start, end), keepingInexact);
  }
  return exact;
}

/** How many values `value` holds (itself, and every item, key's value and container in it), counted up to limit + 1. */
function valuesUpTo(value: unknown, limit: number): number {
  const stack: unknown[] = [value];
  let count = 0;
  while (stack.length > 0) {
    const v = stack.pop();
    if (++count > limit) return count;
    if (typeof v !== "object" || v === null) continue;
    const items: unknown[] = Array.isArray(v) ? v : Object.values(v);
    if (count + items.length > limit) return limit + 1;
    // One at a time: spread as arguments, 131,072 items pass V8's limit on them (a RangeError).
    for (const item of items) stack.push(item);
  }
  return count;
}

function inexactPastBudget(field: string): GatewayError {
  return badRequest(
    `${field} holds a number JavaScript cannot hold exactly (an integer past 2^53, or past a double's range), and the fields holding one hold more than ${MAX_EXACT_VALUES} values together: the gateway keeps such numbers as written in smaller fields only (a seed, a schema's bound); send them within those bounds, or as strings`,
    field,
    "json_too_complex",
  );
}

/** The JSON text of a value, serialised as it is (the JSON.parse source text access proposal, in V8 since 11.4). */
declare global {
  interface JSON {
    rawJSON(text: string): object;
  }
}

/**
 * A number JSON.parse would change stays the text the client wrote, serialised again as that text:
 * passed on, the upstream reads what the client sent.
 */
function keepingInexact(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === "number" && context?.source !== undefined && isInexactNumber(context.source) ? JSON.rawJSON(context.source) : value;
}

function shapeError({ rule, field }: ShapeExcess, bounds: ShapeBounds, what = "request body"): GatewayError {
  const where = field === null ? "" : ` (in ${field})`;
  if (rule === "depth") return badRequest(`${what} nests objects and arrays more than ${bounds.maxDepth} levels deep${where}`, field, "json_too_deep");
  if (rule === "nodes") return badRequest(`${what} holds more than ${bounds.maxNodes} objects, arrays and keys${field === null ? "" : ` (passed in ${field})`}`, field, "json_too_complex");
  return badRequest(`${what} has an object with more than ${bounds.maxObjectKeys} keys${where}`, field, "json_too_complex");
}

/**
 * What refuses a realtime session's message the gateway is to parse (a session.update, its model
 * pinned), held to a request body's bounds: over `limit` bytes (maxBodyBytes), or past BODY_SHAPE.
 * A frame may be 32 MiB (the runtime's bound), and parsing, copying and serialising 32 MiB of `{}`
 * again is more than an isolate's 128 MB holds: one message would end every request and session
 * the isolate serves. A message the gateway does not parse (audio) is not held to it: passed on as
 * the string the runtime already holds, it costs nothing more, and an append may be 15 MiB
 * (OpenAI's bound, vLLM-Omni's). Null when it may go on.
 */
export function sessionMessageRefusal(text: string, limit: number): GatewayError | null {
  if (utf8Length(text, limit) > limit) return tooLarge(limit, "event");
  const excess = shapeExcess(text);
  return excess && shapeError(excess, BODY_SHAPE, "event");
}

/**
 * `text`'s length in UTF-8, counted only when its length in UTF-16 units does not settle whether
 * it is over `limit` (a unit is 1 to 3 bytes, a surrogate pair 4): an ASCII message is never walked.
 */
function utf8Length(text: string, limit: number): number {
  if (text.length > limit || text.length * 3 <= limit) return text.length;
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // A surrogate half is 2 of a pair's 4 bytes; an unpaired one is sent as U+FFFD, 3.
    bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : c >= 0xd800 && c <= 0xdfff ? 2 : 3;
  }
  return bytes;
}
