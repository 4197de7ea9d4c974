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
export class TailKeeper {
  private chunks: Uint8Array[] = [];
  private bytes = 0;
  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  push(chunk: Uint8Array): void {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    while (this.chunks.length > 1 && this.bytes - (this.chunks[0] as Uint8Array).length >= this.limit) {
      this.bytes -= (this.chunks.shift() as Uint8Array).length;
    }
  }

  bytesView(): Uint8Array {
    return this.chunks.length === 1 ? (this.chunks[0] as Uint8Array) : concat(...this.chunks);
  }
}

/** How much of a body's end is kept to read its usage from: the final usage event, or a non-streamed body's usage. */
export const USAGE_TAIL_BYTES = 8192;

const decoder = new TextDecoder();

/**
 * The last `usage` object in the tail of a response (the final SSE usage event, or the usage of
 * a non-streamed body), read once when the body has ended.
 */
export function readUsage(tail: Uint8Array): Usage | null {
  const text = decoder.decode(tail);
  const at = text.lastIndexOf('"usage"');
  if (at < 0) return null;
  const open = text.indexOf("{", at);
  if (open < 0) return null;
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return toUsage(text.slice(open, i + 1));
  }
  return null;
}

interface UsageJson {
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
  prompt_tokens_details?: { cached_tokens?: unknown } | null;
  /** The Responses API's names. */
  input_tokens?: unknown;
  output_tokens?: unknown;
  input_tokens_details?: { cached_tokens?: unknown } | null;
}

const reported = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x) && x >= 0;
const count = (x: unknown): number => (reported(x) ? x : 0);

function toUsage(json: string): Usage | null {
  try {
    const u = JSON.parse(json) as UsageJson;
    if (typeof u.prompt_tokens === "number") {
      const cached = u.prompt_tokens_details?.cached_tokens;
      return { promptTokens: count(u.prompt_tokens), completionTokens: count(u.completion_tokens), cachedTokens: count(cached), cacheReported: reported(cached) };
    }
    if (typeof u.input_tokens === "number") {
      const cached = u.input_tokens_details?.cached_tokens;
      return { promptTokens: count(u.input_tokens), completionTokens: count(u.output_tokens), cachedTokens: count(cached), cacheReported: reported(cached) };
    }
    return null;
  } catch {
    return null;
  }
}

/** Usage as a lease's release carries it to the routing object. */
export function tokenUsage(u: Usage | null): TokenUsage | undefined {
  return u ? { prompt: u.promptTokens, completion: u.completionTokens, cached: u.cachedTokens, cacheReported: u.cacheReported } : undefined;
}
