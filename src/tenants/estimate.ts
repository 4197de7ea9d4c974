import type { Endpoint } from "../openai/endpoints.ts";
import { mediaChars } from "../prefix/media.ts";
import type { LeaseRelease, TokenUsage, UsageEstimate } from "../routing/protocol.ts";
import { field, isTokenCount } from "../stream/usage.ts";

/**
 * What a virtual key is charged for an answer whose usage the upstream never reported: one its
 * client left (or the gateway's total deadline cut) after it began — the engine is stopped then,
 * and reports nothing — or one that ended with none (a server that ignores
 * `stream_options.include_usage`). Without a charge, a client that stops every stream before its
 * last event would spend no budget at all.
 */

/**
 * Whether an attempt's end is charged an estimate: the key counts tokens, no usage came, and
 * the answer had begun (its first token, or a whole answer's headers) — before that the engine
 * may not have begun it — and it was served, or left: by its client, or cut by the request's
 * total deadline while the client read it. Not when its backend failed it, nor when the backend
 * dripped a whole answer past its limit: neither is the key's doing.
 */
export function chargesEstimate(o: { counts: boolean; usage: boolean; began: boolean; end: "served" | "left" | "failed" }): boolean {
  return o.counts && !o.usage && o.began && o.end !== "failed";
}

/**
 * Whether a release's usage is its key's to be charged: not that of a body its backend broke off
 * or left stalled (the backend's doing, as chargesEstimate's "failed"), even when its events so
 * far carried the usage (vLLM's continuous_usage_stats). It still counts as the backend's work.
 */
export function chargesUsage(r: Pick<LeaseRelease, "outcome" | "failure">): boolean {
  return !(r.outcome === "upstream-error" && (r.failure === "broken-off" || r.failure === "stalled"));
}

/**
 * A request's prompt as an estimate counts it: the characters of its text (every string of the
 * body but its media, told by their place in its content parts, src/prefix/media.ts: an image's
 * size says little of its tokens, and is not charged) and the token ids it gives as numbers (a
 * completion's or an embedding's input). Walked only when an estimate is made, never on the
 * request's path; the body's depth is bounded (src/openai/body-shape.ts).
 */
export function promptSize(body: Readonly<Record<string, unknown>>, endpoint: Endpoint): Pick<UsageEstimate, "chars" | "tokens"> {
  const size = { chars: -mediaChars(endpoint, body), tokens: 0 };
  const walk = (v: unknown, inArray: boolean): void => {
    if (typeof v === "string") size.chars += v.length;
    else if (typeof v === "number") {
      if (inArray && Number.isInteger(v)) size.tokens++;
    } else if (Array.isArray(v)) {
      for (const x of v) walk(x, true);
    } else if (typeof v === "object" && v !== null) {
      for (const x of Object.values(v)) walk(x, false);
    }
  };
  walk(body, false);
  return size;
}

const decoder = new TextDecoder();

/**
 * The characters of the text a whole answer generated, for its completion's estimate: a chat
 * answer's message (its content, reasoning and tool calls' arguments), a completion's text, a Responses
 * answer's output (its text and function calls' arguments). Parsed only for an answer that
 * reported no usage, never on the path of one that did; 0 for a body that is none of these (an
 * embedding or a rerank generates no text).
 */
export function answerChars(body: ArrayBuffer): number {
  let answer: unknown;
  try {
    answer = JSON.parse(decoder.decode(body));
  } catch {
    return 0;
  }
  let chars = 0;
  const add = (v: unknown): void => {
    if (typeof v === "string") chars += v.length;
    else for (const part of list(v)) add(field(part, "text"));
  };
  for (const choice of list(field(answer, "choices"))) {
    add(field(choice, "text"));
    const message = field(choice, "message");
    add(field(message, "content"));
    // vLLM names it either way (both, in the releases that renamed it): counted once.
    add(field(message, "reasoning_content") ?? field(message, "reasoning"));
    for (const call of list(field(message, "tool_calls"))) add(field(field(call, "function"), "arguments"));
  }
  for (const item of list(field(answer, "output"))) {
    add(field(item, "content"));
    add(field(item, "arguments"));
  }
  return chars;
}

function list(v: unknown): unknown[] {
  return Array.isArray(v) ? v : [];
}

/**
 * The usage an estimate charges: the prompt's characters over the backend's characters per token
 * (learned from its reports, else 4) and its token ids, priced as uncached; one completion token
 * per event that came — what vLLM, SGLang and llama.cpp send by default, fewer where a server packs
 * several tokens into an event, and a few more on the Responses API, whose answers open and close
 * with events of their own — or, for a whole answer, its text at the same characters per token.
 * null for figures no count could be.
 */
export function estimatedUsage(e: UsageEstimate, charsPerToken: number): TokenUsage | null {
  const answer = e.answerChars ?? 0;
  if (!isTokenCount(e.chars) || !isTokenCount(e.tokens) || !isTokenCount(e.events) || !isTokenCount(answer) || !(charsPerToken > 0)) return null;
  const prompt = Math.min(Number.MAX_SAFE_INTEGER, Math.round(e.chars / charsPerToken) + e.tokens);
  const completion = Math.min(Number.MAX_SAFE_INTEGER, e.events + Math.round(answer / charsPerToken));
  return { prompt, completion, cached: 0 };
}
