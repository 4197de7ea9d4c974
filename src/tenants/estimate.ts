import type { TokenUsage, UsageEstimate } from "../routing/protocol.ts";
import { isTokenCount } from "../stream/usage.ts";

/**
 * What a virtual key is charged for an answer its client left (or the gateway's own limit cut)
 * after it began and before the upstream reported its usage: the engine stopped then, and
 * reports nothing. Without a charge, a client that stops every stream before its last event
 * would spend no budget at all.
 *
 * The prompt is counted as routing counts it, by its blocks and the backend's characters per
 * token (learned from its reports, else 4), priced as uncached; the completion as one token per
 * event that reached the client — what vLLM, SGLang and llama.cpp send by default, and fewer
 * where a server packs several tokens into an event. `tokensOf`: a block count's prompt tokens.
 */
export function estimatedUsage(e: UsageEstimate, tokensOf: (blocks: number) => number): TokenUsage | null {
  if (!isTokenCount(e.blocks) || !isTokenCount(e.events)) return null;
  const prompt = Math.round(tokensOf(e.blocks));
  return isTokenCount(prompt) ? { prompt, completion: e.events, cached: 0 } : null;
}
