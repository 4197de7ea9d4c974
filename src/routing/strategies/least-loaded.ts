import { load, usable, type Candidate, type Choice, type Policy, type Rng } from "../policy.ts";

/** The lowest in-flight count per unit of weight below the hard cap, ties broken at random. */
export const leastLoaded: Policy = {
  reads: [],
  pick: (candidates, _request, rng) => leastLoadedChoice(candidates, rng),
};

export function leastLoadedChoice(candidates: readonly Candidate[], rng: Rng): Choice | null {
  const index = leastLoadedIndex(candidates, rng);
  return index < 0 ? null : { index, reason: "least-loaded", matched: 0 };
}

/** Lowest in-flight per unit of weight below the hard cap; ties broken at random (reservoir sampling); −1 for none. */
export function leastLoadedIndex(candidates: readonly Candidate[], rng: Rng): number {
  let best = -1;
  let bestLoad = Infinity;
  let ties = 0;
  for (let i = 0; i < candidates.length; i++) {
    const c = candidates[i] as Candidate;
    if (!usable(c)) continue;
    const l = load(c);
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
