import type { TimedRequest, TimedTrace } from "./timed.ts";

export interface PrefixCeiling {
  /** Σ cached / Σ prompt tokens: the kv_hit no routing over any fleet can beat; null for no tokens. */
  kvHit: number | null;
  promptTokens: number;
  cachedTokens: number;
  /** Each request's cached tokens at the ceiling, in trace order. */
  perRequest: number[];
}

/**
 * The kv_hit of one infinite cache that sees every request in arrival order: a request's leading
 * blocks seen before are cached, token-weighted (a partial last block counts its own tokens). This
 * is how the Mooncake traces' README computes its reference figures (0.374 conversation, 0.651
 * synthetic), and it bounds any router: a fleet can only split that cache, and evict from it.
 */
export function prefixCeiling(trace: Pick<TimedTrace, "blockTokens" | "requests">): PrefixCeiling {
  const seen = new Set<number>();
  // A trace that sends the same prompt again shares its chain: once seen, all of it stays seen.
  const seenChains = new Set<readonly number[]>();
  const perRequest: number[] = [];
  let promptTokens = 0;
  let cachedTokens = 0;
  for (const request of trace.requests) {
    const again = seenChains.has(request.blocks);
    const cached = leadingCachedTokens(request, trace.blockTokens, (block) => again || seen.has(block));
    if (!again) {
      for (const block of request.blocks) seen.add(block);
      seenChains.add(request.blocks);
    }
    perRequest.push(cached);
    promptTokens += request.promptTokens;
    cachedTokens += cached;
  }
  return { kvHit: promptTokens === 0 ? null : cachedTokens / promptTokens, promptTokens, cachedTokens, perRequest };
}

/**
 * A ceiling request by request, by trace index: what an ideal cache held of each prompt, and the
 * prompt's tokens. A run's kv_hit counts only some requests (those answered with their usage), and
 * its ceiling must count the same ones (bench/replay/open-loop-stats.ts).
 */
export interface CeilingPerRequest {
  cached: readonly number[];
  prompt: readonly number[];
}

/** prefixCeiling() request by request. */
export function ceilingPerRequest(trace: Pick<TimedTrace, "blockTokens" | "requests">): CeilingPerRequest {
  return { cached: prefixCeiling(trace).perRequest, prompt: trace.requests.map((r) => r.promptTokens) };
}

/** The tokens of `request`'s leading blocks that `cached` holds, up to the first it does not: a partial last block counts its own tokens. */
function leadingCachedTokens(request: Pick<TimedRequest, "blocks" | "promptTokens">, blockTokens: number, cached: (block: number) => boolean): number {
  let tokens = 0;
  for (let i = 0; i < request.blocks.length && cached(request.blocks[i] as number); i++) tokens += Math.min(blockTokens, request.promptTokens - i * blockTokens);
  return tokens;
}

/**
 * The share of the ceiling's cached tokens that its `top` largest hits carry, for each count in
 * `tops` (null when nothing is cached). Where a few requests carry most of the hits, whether each
 * of them still finds its prefix cached can move a run's kv_hit by whole percents: a hint of how
 * far two runs' kv_hit may differ for reasons no router controls.
 */
export function hitConcentration(perRequest: readonly number[], tops: readonly number[]): (number | null)[] {
  const total = perRequest.reduce((a, b) => a + b, 0);
  const largest = [...perRequest].sort((a, b) => b - a);
  return tops.map((top) => (total === 0 ? null : largest.slice(0, top).reduce((a, b) => a + b, 0) / total));
}

/**
 * The kv_hit of one cache that holds `capacityTokens` (a fleet's whole KV memory, pooled) and
 * evicts the least recently used block, seeing every request in arrival order. Not a bound on a
 * fleet: separate caches with requests placed by prefix can beat one pooled LRU (a working set
 * kept apart is not evicted by another's traffic), and a cache that knew the future would reach
 * prefixCeiling in far less memory. It says how much of the gap to the ceiling LRU eviction alone
 * makes, which is what engines do (vLLM frees a finished request's blocks tail first: here a
 * request's blocks are touched last to first, so a prefix is evicted from its end).
 */
export function pooledLruHit(trace: Pick<TimedTrace, "blockTokens" | "requests">, capacityTokens: number): number | null {
  const capacity = Math.floor(capacityTokens / trace.blockTokens);
  // Insertion order is recency: the first key is the least recently used block.
  const lru = new Map<number, true>();
  let promptTokens = 0;
  let cachedTokens = 0;
  for (const request of trace.requests) {
    cachedTokens += leadingCachedTokens(request, trace.blockTokens, (block) => lru.has(block));
    for (let i = request.blocks.length - 1; i >= 0; i--) {
      const block = request.blocks[i] as number;
      lru.delete(block);
      lru.set(block, true);
    }
    for (const oldest of lru.keys()) {
      if (lru.size <= capacity) break;
      lru.delete(oldest);
    }
    promptTokens += request.promptTokens;
  }
  return promptTokens === 0 ? null : cachedTokens / promptTokens;
}
