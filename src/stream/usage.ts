import type { TokenUsage } from "../routing/protocol.ts";
import { concat } from "./bytes.ts";

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
    return this.chunks.length === 1 ? (this.chunks[0] as Uint8Array) : concat(...this.chunks);
  }
}

/** How much of a body's end is kept to read its usage from: the final usage event, or a non-streamed body's usage. */
export const USAGE_TAIL_BYTES = 8192;

/** The most a Responses stream's tail grows by for the request fields its closing event repeats. */
export const ECHO_TAIL_MAX_BYTES = 1024 * 1024;

/**
 * How much of a Responses API stream's end is kept to read its usage from. Its closing event
 * (response.completed) repeats the request's fields, and SGLang writes them after the usage:
 * `instructions` and `tools`, tens of KiB for an agent, pushed the usage out of an 8 KiB tail and
 * the key was charged an estimate. What is repeated is no longer than the request in UTF-8 (at
 * most 3 bytes a UTF-16 unit of `requestLength`), up to ECHO_TAIL_MAX_BYTES.
 */
export function responsesTailBytes(requestLength: number): number {
  return USAGE_TAIL_BYTES + Math.min(3 * requestLength, ECHO_TAIL_MAX_BYTES);
}

/**
 * Keeps references to the chunks a relayed body's usage is read from: its last USAGE_TAIL_BYTES
 * (a stream's usage event, a chat completion's or an embeddings answer's usage) and, for a
 * non-streamed body (`keepHead`), its first as many too: vLLM puts a rerank's results after its
 * usage, and a chat answer's prompt_logprobs.
 */
export class BodyEnds {
  private readonly head: Uint8Array[] = [];
  private headLeft: number;
  private readonly tail: TailKeeper;
  private dropped = false;

  /** `tailBytes`: how much of the end is kept (more than USAGE_TAIL_BYTES for a Responses stream: responsesTailBytes). */
  constructor(keepHead: boolean, tailBytes = USAGE_TAIL_BYTES) {
    this.headLeft = keepHead ? USAGE_TAIL_BYTES : 0;
    this.tail = new TailKeeper(tailBytes);
  }

  push(chunk: Uint8Array): void {
    if (this.headLeft > 0) {
      this.head.push(chunk);
      this.headLeft -= chunk.length;
    } else if (this.tail.push(chunk)) {
      this.dropped = true;
    }
  }

  /** The usage at the body's end, else at its start; a body kept whole is read as one. */
  usage(): Usage | null {
    if (this.head.length === 0) return readUsage(this.tail.bytesView());
    if (!this.dropped) return readUsage(concat(...this.head, this.tail.bytesView()));
    return readUsage(this.tail.bytesView()) ?? readUsage(concat(...this.head));
  }
}

/**
 * A non-streamed body's usage, the body held whole: at its end, or (after a long field such as
 * vLLM's prompt_logprobs) the top-level `usage` of the parsed body.
 */
export function readWholeUsage(body: ArrayBuffer): Usage | null {
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
