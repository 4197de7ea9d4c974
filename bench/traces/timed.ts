import type { ChatMessage, TraceKind } from "./types.ts";

/**
 * The shape of an open-loop trace: independent requests, each with the time it arrives, sent
 * whether or not earlier ones have been answered (bench/replay/open-loop.ts). A session trace
 * (types.ts) is the closed-loop counterpart.
 */

export const TIMED_KINDS = ["mooncake", "b2b-saas"] as const;
export type TimedKind = (typeof TIMED_KINDS)[number];

export interface TimedRequest {
  /** Unique in the trace, e.g. `mooncake-conversation-17`. */
  id: string;
  /** When the trace says it arrives, in ms from the trace's start, at speed 1. */
  atMs: number;
  /**
   * Index (in the trace's `requests`) of the earlier turn of the same conversation this one
   * follows, or null. A follow-up is not sent before that turn's answer has ended: a user reads
   * an answer before replying to it.
   */
  after: number | null;
  maxTokens: number;
  /** Prompt tokens, counted in the trace's own units (those of `blocks`). */
  promptTokens: number;
  /**
   * The prompt as a chain of block keys, `blockTokens` tokens each (the last block may be
   * partial): equal leading keys mean an equal prefix. What the ideal-cache ceiling is computed from.
   */
  blocks: readonly number[];
  /** The messages to send, rendered when called: a long trace's prompts are not held in memory at once. */
  messages(): ChatMessage[];
}

export interface TimedTrace {
  /** A session trace's kind when it was one, sent closed-loop (bench/virtual/closed-loop.ts). */
  kind: TimedKind | TraceKind;
  /** The options that shaped this trace, for a results file. */
  params: Record<string, number | string>;
  /** Tokens per block of every request's `blocks`. */
  blockTokens: number;
  /** In arrival order (atMs never decreases); a follow-up always comes after the turn it follows. */
  requests: TimedRequest[];
}
