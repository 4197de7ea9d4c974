/** What a replay takes and what it records, per request and overall. */

export interface ReplayOptions {
  /** An OpenAI-compatible base URL (kvgate, a fleet worker, another gateway); requests go to {baseUrl}/v1/chat/completions. */
  baseUrl: string;
  model: string;
  /** Sent as `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  headers?: Record<string, string>;
  /** Per request, from sending it to the end of its stream. Default 120,000. */
  timeoutMs?: number;
  /** Extra body fields for every request (e.g. `kvgate_sim` test controls); they cannot replace model, messages, max_tokens, stream or stream_options. */
  extraBody?: Record<string, unknown>;
}

export interface RequestResult {
  session: string;
  /** Index of the turn in its session, from 0. */
  turn: number;
  /** HTTP status; 0 when no response arrived (refused, reset, timed out before headers). */
  status: number;
  /** Why the request failed; null when it succeeded (2xx, an event stream, [DONE], no error event). */
  error: string | null;
  /** Request start → arrival of the first non-empty delta.content (or delta.tool_calls, or text for completions). */
  ttftMs: number | null;
  /** Request start → end of the stream (or the failure). */
  totalMs: number;
  /**
   * Set when the client stopped waiting: the timeout it waited, from the request's start (`error`
   * says so too). Without a first token by then, the request's TTFT is at least this: the
   * summaries rank it as that bound, above the TTFTs of answered requests (stats.ts ttftPercentiles).
   */
  timedOutMs?: number;
  /** From the final usage chunk. */
  promptTokens: number | null;
  cachedTokens: number | null;
  completionTokens: number | null;
  /** x-kvgate-backend / x-kvgate-reason response headers, when present. */
  backend: string | null;
  reason: string | null;
}

export interface ReplayResult {
  /** Every request, grouped by session in trace order, turns in order within a session. */
  requests: RequestResult[];
  wallMs: number;
}
