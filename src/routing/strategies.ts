import type { Strategy } from "../config/schema.ts";
import type { PrefixSet } from "./prefix-set.ts";

export type RouteReason = "prefix-hit" | "hot-spread" | "least-loaded" | "round-robin" | "random" | "saturated-spill" | "load-balanced";

/** What a strategy sees of one backend. */
export interface BackendView {
  inFlight: number;
  maxInFlight: number;
  prefixes: PrefixSet;
  /** Prompt blocks routed here and not yet prefilled, by the backend's drain rate. */
  prefillDebt: number;
  /** False while its breaker is open, or when this request already failed on it. */
  available: boolean;
  /** Its share of the load relative to the others (the deployment's `weight`, default 1). */
  weight: number;
}

/** In-flight requests per unit of weight: a weight-2 server at 4 is as loaded as a weight-1 one at 2. */
function load(b: BackendView): number {
  return b.inFlight / b.weight;
}

/** May take a request: available and below its hard in-flight cap. */
function usable(b: BackendView): boolean {
  return b.available && b.inFlight < b.maxInFlight;
}

export interface PrefixAwareParams {
  saturation: number;
  balanceAbs: number;
  balanceRel: number;
}

/** Records that a request matched the prefix ending at `hash`; says whether that prefix is hot. */
export type HotProbe = (hash: number) => boolean;

export interface Choice {
  index: number;
  reason: RouteReason;
  matched: number;
}

export type Rng = () => number;

/**
 * Picks a backend, or null when none is usable (all unavailable or at their hard in-flight cap).
 * Pure: the caller owns the counts and takes the in-flight slot in the same step.
 */
export function choose(
  strategy: Strategy,
  backends: readonly BackendView[],
  chain: ArrayLike<number>,
  params: PrefixAwareParams,
  rng: Rng,
  rrCursor: number,
  hot: HotProbe | null = null,
): Choice | null {
  switch (strategy) {
    case "prefix-aware":
      // No prompt to place (embeddings, rerank, score): there is no cache to aim for, and the
      // prefill debt of other requests' prompts is no measure of this one's wait.
      return chain.length === 0 ? leastLoadedChoice(backends, rng) : prefixAware(backends, chain, params, rng, hot);
    case "least-loaded":
      return leastLoadedChoice(backends, rng);
    case "random": {
      const index = weightedRandom(backends, rng);
      return index < 0 ? null : { index, reason: "random", matched: 0 };
    }
    case "round-robin": {
      const n = backends.length;
      for (let k = 0; k < n; k++) {
        const index = (rrCursor + k) % n;
        const b = backends[index] as BackendView;
        if (usable(b)) return { index, reason: "round-robin", matched: 0 };
      }
      return null;
    }
  }
}

/** A usable backend with probability in proportion to its weight. */
function weightedRandom(backends: readonly BackendView[], rng: Rng): number {
  let total = 0;
  for (const b of backends) if (usable(b)) total += b.weight;
  let at = rng() * total;
  let last = -1;
  for (let i = 0; i < backends.length; i++) {
    const b = backends[i] as BackendView;
    if (!usable(b)) continue;
    last = i;
    at -= b.weight;
    if (at < 0) return i;
  }
  return last;
}

function leastLoadedChoice(backends: readonly BackendView[], rng: Rng): Choice | null {
  const index = leastLoaded(backends, rng);
  return index < 0 ? null : { index, reason: "least-loaded", matched: 0 };
}

/** Lowest in-flight per unit of weight below the hard cap; ties broken at random (reservoir sampling). */
function leastLoaded(backends: readonly BackendView[], rng: Rng): number {
  let best = -1;
  let bestLoad = Infinity;
  let ties = 0;
  for (let i = 0; i < backends.length; i++) {
    const b = backends[i] as BackendView;
    if (!usable(b)) continue;
    const l = load(b);
    if (l < bestLoad) {
      best = i;
      bestLoad = l;
      ties = 1;
    } else if (l === bestLoad && rng() * ++ties < 1) {
      best = i;
    }
  }
  return best;
}

/**
 * Picks the backend where the prompt's first token is likely to come soonest: the prompt work
 * already queued there (prefill debt) plus the blocks it would have to prefill itself (those past
 * its cached prefix), in blocks — so a warm cache wins unless its backend is backed up by more
 * than the cache saves, and a burst of new prompts spreads instead of convoying onto the one
 * backend that just went idle. Ties: longer match (no duplicate KV), then fewer in flight.
 * A backend at the saturation valve, or much busier than the least-loaded one, is passed over;
 * both in in-flight requests per unit of weight, so a weight-2 server takes twice the requests.
 * A shared prefix (a branch point, or a hot one) counts as cached everywhere: a copy elsewhere
 * costs one prefill and then serves everyone, so it is replicated across the fleet instead of
 * piling onto the first backend that saw it, while a conversation's own history keeps it where
 * its cache is.
 */
function prefixAware(backends: readonly BackendView[], chain: ArrayLike<number>, p: PrefixAwareParams, rng: Rng, hot: HotProbe | null): Choice | null {
  let minLoad = Infinity;
  for (const b of backends) if (usable(b) && load(b) < minLoad) minLoad = load(b);
  if (minLoad === Infinity) return null;

  const matches = new Array<number>(backends.length);
  let bestAll = 0;
  let bestAt = -1;
  let bestAllSaturated = false;
  for (let i = 0; i < backends.length; i++) {
    const b = backends[i] as BackendView;
    const m = !usable(b) || chain.length === 0 ? 0 : b.prefixes.match(chain);
    matches[i] = m;
    const saturated = load(b) >= p.saturation;
    if (m > bestAll) {
      bestAll = m;
      bestAt = i;
      bestAllSaturated = saturated;
    } else if (m > 0 && m === bestAll && saturated) {
      bestAllSaturated = true;
    }
  }
  let spread = false;
  if (bestAll > 0) {
    const last = chain[bestAll - 1] as number;
    const branched = (backends[bestAt] as BackendView).prefixes.isInterior(last);
    const popular = hot !== null && hot(last);
    spread = branched || popular;
  }

  let pick = -1;
  let pickCost = Infinity;
  let pickMatch = -1;
  let pickLoad = Infinity;
  let ties = 0;
  for (let i = 0; i < backends.length; i++) {
    const b = backends[i] as BackendView;
    const l = load(b);
    if (!usable(b) || l >= p.saturation) continue;
    if (l - minLoad > p.balanceAbs && l > p.balanceRel * minLoad) continue;
    const m = matches[i] as number;
    const cost = b.prefillDebt + chain.length - (spread ? bestAll : m);
    const better = cost < pickCost || (cost === pickCost && (m > pickMatch || (m === pickMatch && l < pickLoad)));
    if (better) {
      pick = i;
      pickCost = cost;
      pickMatch = m;
      pickLoad = l;
      ties = 1;
    } else if (cost === pickCost && m === pickMatch && l === pickLoad && rng() * ++ties < 1) {
      pick = i;
    }
  }

  if (pick < 0) {
    // Every backend is at the valve: overcommit the least-loaded rather than refuse.
    const index = leastLoaded(backends, rng);
    return { index, reason: bestAll > 0 ? "saturated-spill" : "least-loaded", matched: index < 0 ? 0 : (matches[index] as number) };
  }
  let reason: RouteReason;
  if (bestAll === 0) reason = "least-loaded";
  else if (pickMatch === bestAll) reason = "prefix-hit";
  else if (spread) reason = "hot-spread";
  else reason = bestAllSaturated ? "saturated-spill" : "load-balanced";
  return { index: pick, reason, matched: pickMatch };
}
