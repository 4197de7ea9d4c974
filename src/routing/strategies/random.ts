import { usable, type Candidate, type Policy } from "../policy.ts";

/** A usable candidate with probability in proportion to its weight. */
export const random: Policy = {
  reads: [],
  pick(candidates, _request, rng) {
    let total = 0;
    for (const c of candidates) if (usable(c)) total += c.weight;
    let at = rng() * total;
    let last = -1;
    for (let i = 0; i < candidates.length; i++) {
      const c = candidates[i] as Candidate;
      if (!usable(c)) continue;
      last = i;
      at -= c.weight;
      if (at < 0) return { index: i, reason: "random", matched: 0 };
    }
    return last < 0 ? null : { index: last, reason: "random", matched: 0 };
  },
};
