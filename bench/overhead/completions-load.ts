/**
 * Closed-loop load of the benchmarks' chat bodies at one target: non-streamed answers of
 * NONSTREAM_TOKENS tokens, or streamed answers of `chunks` chunks. bench:overhead, bench:ceiling
 * and bench:profile send the same.
 */
import { chatBodies } from "./bodies.ts";
import type { LoadResult } from "./load-types.ts";
import { runNonStreamLoad } from "./nonstream-load.ts";
import { runStreamLoad } from "./stream-load.ts";
import { COMPLETIONS_PATH } from "./targets.ts";

/** Non-streamed answers stay short (the simulator's default length). */
export const NONSTREAM_TOKENS = 16;

export interface CompletionsLoad {
  /** The target's origin. */
  url: string;
  headers: Record<string, string>;
  model: string;
  /** Chunks per streamed answer (max_tokens); null for non-streamed. */
  chunks: number | null;
  /** Streams ask for stream_options.include_usage (bodies.ts: yes unless false). */
  includeUsage?: boolean;
  connections: number;
  durationMs: number;
  maxRequests: number;
}

export function runCompletionsLoad(o: CompletionsLoad): Promise<LoadResult> {
  const stream = o.chunks !== null;
  const bodies = chatBodies({ model: o.model, stream, maxTokens: o.chunks ?? NONSTREAM_TOKENS, ...(o.includeUsage === undefined ? {} : { includeUsage: o.includeUsage }) });
  const spec = { url: o.url + COMPLETIONS_PATH, headers: o.headers, bodies, connections: o.connections, durationMs: o.durationMs, maxRequests: o.maxRequests };
  return stream ? runStreamLoad(spec) : runNonStreamLoad(spec);
}
