import { eventEnds, eventFields } from "./sse-boundary.ts";
import type { TokenUsage } from "../routing/protocol.ts";
import { join } from "./bytes.ts";
import { EVENT_TAIL_MAX_BYTES, EventTail } from "./event-tail.ts";
import { MarkedUsage, TopLevelUsage, type UsageCatcher } from "./usage-catcher.ts";

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** The upstream reported cachedTokens (0 included); false when its usage had no cached_tokens. */
  cacheReported: boolean;
}

/** Keeps references to the last chunks of a body, up to `limit` bytes — no copying per chunk. */
class TailKeeper {
  private chunks: Uint8Array[] = [];
  private bytes = 0;
  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  /** Keeps `chunk`; true when an older one was let go for it. */
  push(chunk: Uint8Array): boolean {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    let dropped = false;
    while (this.chunks.length > 1 && this.bytes - (this.chunks[0] as Uint8Array).length >= this.limit) {
      this.bytes -= (this.chunks.shift() as Uint8Array).length;
      dropped = true;
    }
    return dropped;
  }

  bytesView(): Uint8Array {
    // Not a spread into a call: an upstream that drips a byte at a time leaves more chunks than a call takes arguments.
    return this.chunks.length === 1 ? (this.chunks[0] as Uint8Array) : join(this.chunks);
  }
}

/** How much of a body's end is kept to read its usage from: the final usage event, or a non-streamed body's usage. */
export const USAGE_TAIL_BYTES = 8192;

/** The most a Responses answer's tail grows by for the request fields its closing event repeats. */
export const ECHO_TAIL_MAX_BYTES = 256 * 1024;

/**
 * How much of a Responses API answer's end is kept to read its usage from. A whole answer's holds
 * the response, the request's fields repeated in it (SGLang's after the usage: `instructions` and
 * `tools`, tens of KiB for an agent), and the usage is read from it parsed whole (responsesUsage):
 * what is repeated is no longer than the request in UTF-8 (3 bytes a UTF-16 unit of
 * `requestLength`), up to ECHO_TAIL_MAX_BYTES. A stream's closing event (response.completed) holds
 * the whole output too: a stream keeps this much and, back from it, the event it begins in (EventTail).
 */
export function responsesTailBytes(requestLength: number): number {
  return 2 * USAGE_TAIL_BYTES + Math.min(3 * requestLength, ECHO_TAIL_MAX_BYTES);
}

/**
 * Keeps references to the chunks a relayed body's usage is read from: its last USAGE_TAIL_BYTES
 * (a stream's usage event, a chat completion's or an embeddings answer's usage) and, for a
 * non-streamed body (`keepHead`), its first as many too: vLLM puts a rerank's results after its
 * usage, and a chat answer's prompt_logprobs. A non-streamed body's usage may lie past both (vLLM's
 * logprobs before it, its prompt_logprobs after): `catchUsage` catches it as the bytes pass
 * (usage-catcher.ts), the one rule for whichever path relays the body.
 */
export class BodyEnds {
  private readonly head: Uint8Array[] = [];
  private headLeft: number;
  private readonly tail: TailKeeper;
  private dropped = false;
  private readonly responses: number | undefined;
  /** A Responses stream's end, from the start of its last events (the closing one whole). */
  private readonly events: EventTail | null;
  /** A non-streamed body's usage object, caught wherever it lies as the body passes (usage-catcher.ts). */
  private readonly catcher: UsageCatcher | null;

  /**
   * `responses`: a Responses API answer's, whose last `responses` bytes are kept (a stream's from
   * the start of the event they begin in) and whose usage is read where that API puts it
   * (responsesUsage), never from a search of its text. `catchUsage`: a non-streamed body (with
   * `keepHead`) whose usage is read: its usage object is caught as it passes (a Responses answer's
   * at its top level alone). Nothing per chunk for a stream, whose usage is its last event's, nor
   * for a body whose usage no one reads.
   */
  constructor(keepHead: boolean, responses?: number, catchUsage = false) {
    this.responses = responses;
    this.headLeft = keepHead ? USAGE_TAIL_BYTES : 0;
    this.tail = new TailKeeper(responses ?? USAGE_TAIL_BYTES);
    this.events = responses !== undefined && !keepHead ? new EventTail(responses, EVENT_TAIL_MAX_BYTES) : null;
    this.catcher = keepHead && catchUsage ? (responses !== undefined ? new TopLevelUsage() : new MarkedUsage()) : null;
  }

  push(chunk: Uint8Array): void {
    this.catcher?.push(chunk);
    if (this.events) {
      this.events.push(chunk);
    } else if (this.headLeft > 0) {
      this.head.push(chunk);
      this.headLeft -= chunk.length;
    } else if (this.tail.push(chunk)) {
      this.dropped = true;
    }
  }

  /**
   * The usage at the body's end, else the one caught as it passed, else at its start; a body kept
   * whole is read as one.
   */
  usage(): Usage | null {
    if (this.events) {
      const { bytes, atEventStart } = this.events.view();
      return responsesStreamUsage(bytes, atEventStart);
    }
    const caught = (): Usage | null => {
      const json = this.catcher?.caught();
      return json ? toUsage(json) : null;
    };
    if (this.responses !== undefined) return this.dropped ? caught() : responsesUsage(join([...this.head, this.tail.bytesView()]));
    if (this.head.length === 0) return readUsage(this.tail.bytesView());
    if (!this.dropped) return readUsage(join([...this.head, this.tail.bytesView()]));
    return readUsage(this.tail.bytesView()) ?? caught() ?? readUsage(join(this.head));
  }
}

/** A body's usage; null where reading it threw: the answer is then charged an estimate, and its end still reported. */
export function usageRead(ends: BodyEnds): Usage | null {
  try {
    return ends.usage();
  } catch {
    return null;
  }
}

/**
 * A non-streamed body's usage, the body held whole: at its end, or (after a long field such as
 * vLLM's prompt_logprobs) the top-level `usage` of the parsed body.
 */
export function readWholeUsage(body: ArrayBuffer, responses = false): Usage | null {
  if (responses) return responsesUsage(new Uint8Array(body));
  const atEnd = readUsage(new Uint8Array(body, Math.max(0, body.byteLength - USAGE_TAIL_BYTES)));
  if (atEnd || body.byteLength <= USAGE_TAIL_BYTES) return atEnd;
  const text = decoder.decode(body);
  // An upstream that reports no usage (a score or rerank server may not) costs a search, not a parse.
  if (!text.includes('"usage"')) return null;
  try {
    const parsed: unknown = JSON.parse(text);
    const usage = typeof parsed === "object" && parsed !== null && "usage" in parsed ? parsed.usage : null;
    return typeof usage === "object" && usage !== null ? usageOf(usage as UsageJson) : null;
  } catch {
    return null;
  }
}

const decoder = new TextDecoder();

/**
 * A Responses API answer's usage, where that API puts it: a whole body's at its top level, a
 * stream's in its last event's `response.usage` (the closing event, parsed whole). A search for
 * the last "usage" object would find one the client wrote: a server repeats the request's tools,
 * metadata and schemas in that event, SGLang's after the usage. Null when the body (or event) is
 * not whole in `bytes`: the answer is charged an estimate, never what its text says elsewhere.
 */
function responsesUsage(bytes: Uint8Array): Usage | null {
  return usageIn(parsedJson(decoder.decode(bytes)));
}

/** `atEventStart`: the tail begins where an event begins (EventTail.view). */
function responsesStreamUsage(tail: Uint8Array, atEventStart: boolean): Usage | null {
  const data = lastEventData(tail, atEventStart);
  return data === null ? null : usageIn(field(parsedJson(data), "response"));
}

function parsedJson(json: string): unknown {
  try {
    return JSON.parse(json);
  } catch {
    return undefined;
  }
}

function usageIn(holder: unknown): Usage | null {
  const usage = field(holder, "usage");
  return typeof usage === "object" && usage !== null ? usageOf(usage as UsageJson) : null;
}

export function field(o: unknown, name: string): unknown {
  return typeof o === "object" && o !== null && !Array.isArray(o) ? (o as Record<string, unknown>)[name] : undefined;
}

/**
 * The data of a stream's last event that holds any but `[DONE]` (sse-boundary.ts's reading of
 * events); null when none is whole: unless `atEventStart`, the tail's first event may have begun
 * before it.
 */
function lastEventData(tail: Uint8Array, atEventStart: boolean): string | null {
  const ends = eventEnds(tail, 0);
  // What follows the last end too: a stream that ended without its blank line.
  const bounds = [...(atEventStart ? [0] : []), ...ends, tail.length];
  for (let k = bounds.length - 1; k >= 1; k--) {
    const { data } = eventFields(tail.subarray(bounds[k - 1] as number, bounds[k] as number));
    if (data !== null && data.trim() !== "[DONE]") return data;
  }
  return null;
}

/**
 * The last `usage` object in the tail of a response (the final SSE usage event, or the usage of
 * a non-streamed body), read once when the body has ended.
 */
export function readUsage(tail: Uint8Array): Usage | null {
  const text = decoder.decode(tail);
  // The last "usage" that is a key with an object of counts: the word may be a value too (a token's text).
  for (let at = text.lastIndexOf('"usage"'); at >= 0; at = at === 0 ? -1 : text.lastIndexOf('"usage"', at - 1)) {
    const open = objectAfterKey(text, at + '"usage"'.length);
    if (open < 0) continue;
    let depth = 0;
    for (let i = open; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 0x7b) depth++;
      else if (c === 0x7d && --depth === 0) {
        const usage = toUsage(text.slice(open, i + 1));
        if (usage) return usage;
        break;
      }
    }
  }
  return null;
}

/** Where the object a key's colon at `from` introduces opens (`"usage": {`), or -1 when `from` follows no key of an object. */
function objectAfterKey(text: string, from: number): number {
  let i = from;
  while (i < text.length && /\s/.test(text[i] as string)) i++;
  if (text[i] !== ":") return -1;
  i++;
  while (i < text.length && /\s/.test(text[i] as string)) i++;
  return text[i] === "{" ? i : -1;
}

interface UsageJson {
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
  prompt_tokens_details?: { cached_tokens?: unknown } | null;
  /** The Responses API's names, and the Realtime API's (`input_token_details`). */
  input_tokens?: unknown;
  output_tokens?: unknown;
  input_tokens_details?: { cached_tokens?: unknown } | null;
  input_token_details?: { cached_tokens?: unknown } | null;
  total_tokens?: unknown;
}

/**
 * A count of tokens: a whole number an engine could have counted. One past 2^53 (1e308) is none:
 * summed into a key's spend it became Infinity, then NaN, and the key's budget compared false.
 */
export const isTokenCount = (x: unknown): x is number => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;
const count = (x: unknown): number => (isTokenCount(x) ? x : 0);

function toUsage(json: string): Usage | null {
  try {
    return usageOf(JSON.parse(json) as UsageJson);
  } catch {
    return null;
  }
}

/**
 * A usage object in the Chat Completions' names or the Responses (and Realtime) API's, or a total
 * alone (older vLLM's and TEI-style servers' rerank and embeddings: an input-only call, its total
 * the prompt's); null when it has none of them.
 */
export function usageOf(u: UsageJson): Usage | null {
  if (typeof u.prompt_tokens === "number") {
    const cached = u.prompt_tokens_details?.cached_tokens;
    return { promptTokens: count(u.prompt_tokens), completionTokens: count(u.completion_tokens), cachedTokens: count(cached), cacheReported: isTokenCount(cached) };
  }
  if (typeof u.input_tokens === "number") {
    const cached = (u.input_tokens_details ?? u.input_token_details)?.cached_tokens;
    return { promptTokens: count(u.input_tokens), completionTokens: count(u.output_tokens), cachedTokens: count(cached), cacheReported: isTokenCount(cached) };
  }
  if (typeof u.total_tokens === "number") return { promptTokens: count(u.total_tokens), completionTokens: 0, cachedTokens: 0, cacheReported: false };
  return null;
}

/** Usage as a lease's release carries it to the routing object. */
export function tokenUsage(u: Usage | null): TokenUsage | undefined {
  return u ? { prompt: u.promptTokens, completion: u.completionTokens, cached: u.cachedTokens, cacheReported: u.cacheReported } : undefined;
}
