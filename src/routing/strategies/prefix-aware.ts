import { load, usable, type Candidate, type Policy, type RouteReason } from "../policy.ts";
import { copyCost } from "../copy-cost.ts";
import type { PrefixMatch } from "../signals/prefix-match.ts";
import { leastLoadedChoice } from "./least-loaded.ts";

/**
 * Picks the backend where the prompt's first token is likely to come soonest: the prompt work
 * already queued there (prefill debt) plus the blocks it would have to prefill itself (those past
 * its cached prefix), in blocks — so a warm cache wins unless its backend is backed up by more
 * than the cache saves, and a burst of new prompts spreads instead of convoying onto the one
 * backend that just went idle. Ties: longer match (no duplicate KV), then in turn from the
 * backend after the last one picked — not fewer in flight: in closed-loop traffic the backend
 * with fewest in flight is the one whose requests just ended, and the sessions that ended there
 * together would go back there together, to be prefilled in one another's way (a hot prefix's
 * TTFT p50 was 1.4× round-robin's).
 * A backend at the saturation valve (while another is below it) is passed over; the valve and
 * the cost are per unit of weight, so a weight-2 server takes twice the requests. Below the valve,
 * in-flight counts move nothing: the queued prompt work above is the load that delays a first
 * token. Passing over a backend only because it had a few more requests in flight (the group's
 * balanceAbs/balanceRel, which now bound only its shards) copied shared prompts off their cache
 * in open-loop bursts until the fleet's cache thrashed: on llm-d's b2b-saas shape kv_hit was
 * 0.61–0.67 and TTFT p50 1.3–3.9 s, with the rule out of reach (balanceAbs 64) 0.73–0.76 and
 * 0.12 s (3 seeds each).
 * A shared prefix (a branch point, or a hot one) that carries at least a backend's share of the
 * group's new prompts counts as cached everywhere: a copy elsewhere costs one prefill and then
 * serves many, so it is replicated across the fleet instead of piling onto the first backend that
 * saw it, while a conversation's own history keeps it where its cache is — as long as every shared
 * prefix in use fits a backend's cache with room to spare (signals/prefix-match.ts). One of many
 * shared prefixes (a group prompt among 150) stays where it is cached unless its backend's queue
 * outweighs the prefill a copy costs.
 * A copy of a shared prefix not worth replicating is not free once the backend it goes to has a
 * full cache: the prefix stays cached where it was, for the others who use it, and each block
 * copied evicts one, which a later request prefills again (copy-cost.ts). Unpriced, a pressured
 * fleet copied RAG's documents and b2b-saas's group prompts to shorter queues and evicted other
 * requests' reuse. A conversation that moves takes its own history with it — the copy left behind
 * is reused by no one and ages out — so that move costs what it did (priced too, in virtual time
 * pressured tool loops' sessions stayed behind queues: TTFT p50 +3–9% at 16–32 sessions). Figures:
 * the README.
 */
export const prefixAware: Policy = {
  reads: ["prefix"],
  pick(candidates, { chain, blocks, settings, signals, cursor }, rng) {
    // No prompt to place (embeddings, rerank, score): there is no cache to aim for, and the
    // prefill debt of other requests' prompts is no measure of this one's wait.
    if (chain.length === 0) return leastLoadedChoice(candidates, rng);

    let minLoad = Infinity;
    let minDebt = Infinity;
    for (const c of candidates) {
      if (!usable(c)) continue;
      if (load(c) < minLoad) minLoad = load(c);
      if (c.prefillDebt < minDebt) minDebt = c.prefillDebt;
    }
    if (minLoad === Infinity) return null;
    // What a block of prefill costs beside the wait it adds to this request: while some backend
    // is idle, nothing more; when even the least-queued one has a prompt's worth of work waiting,
    // every block prefilled again is work the whole fleet falls further behind by — an overloaded
    // fleet must not trade cache hits for a shorter queue, or it sinks deeper into overload.
    const work = 1 + minDebt / blocks;

    const { matched, best, shared, replicable } = signals.prefix;
    // The valve spills from a backend at it to one below it; with every backend at it (an
    // overloaded fleet) there is nowhere to spill to, and spreading by in-flight count alone would
    // throw away every cache hit when the fleet can least afford the prefill.
    const valve = minLoad < settings.saturation;
    let pick = -1;
    let pickCost = Infinity;
    let pickMatch = -1;
    const n = candidates.length;
    for (let k = 0; k < n; k++) {
      const i = cursor + k < n ? cursor + k : cursor + k - n;
      const c = candidates[i] as Candidate;
      const l = load(c);
      if (!usable(c) || (valve && l >= settings.saturation)) continue;
      const m = matched[i] as number;
      // Its own match counts though still being prefilled: a request queued behind that prefill
      // on the same backend finds the blocks computed when its turn comes, and the wait for them
      // is in the debt already. A shared prefix worth copying counts as cached everywhere (see above).
      // Per unit of weight: a weight-2 server gets through its queue as fast as a weight-1 one through half of it.
      const held = shared && replicable[i] ? best : m;
      // A shared prefix cached on another backend and not here is copied: priced by what it evicts here.
      const copy = shared && held < best ? copyCost(c.cacheFill, best - held) : 0;
      const cost = (c.prefillDebt + (blocks - held + copy) * work) / c.weight;
      if (cost < pickCost || (cost === pickCost && m > pickMatch)) {
        pick = i;
        pickCost = cost;
        pickMatch = m;
      }
    }

    if (pick < 0) return null;
    let reason: RouteReason;
    // A backend holding more of the prompt is full: the move is for its load, cold or not here.
    if (pickMatch < signals.prefix.bestAtCap) reason = "saturated-spill";
    else if (best === 0) reason = "least-loaded";
    else if (pickMatch === best) reason = "prefix-hit";
    // Moved because the shared prefix counted as cached there (a copy on purpose), not for load.
    else if (shared && replicable[pick]) reason = "hot-spread";
    else reason = bestSaturated(candidates, signals.prefix, settings.saturation) ? "saturated-spill" : "load-balanced";
    return { index: pick, reason, matched: pickMatch };
  },
};

/** Whether a backend holding the longest match is at the valve: the request went elsewhere for its load, not the balance rule. */
function bestSaturated(candidates: readonly Candidate[], { matched, best }: PrefixMatch, saturation: number): boolean {
  for (let i = 0; i < candidates.length; i++) if (matched[i] === best && load(candidates[i] as Candidate) >= saturation) return true;
  return false;
}
