import { usable, type Candidate, type Policy } from "../policy.ts";

/** Each usable candidate in turn, from the one after this config version's previous pick. */
export const roundRobin: Policy = {
  reads: [],
  pick(candidates, { cursor }) {
    const n = candidates.length;
    for (let k = 0; k < n; k++) {
      const index = (cursor + k) % n;
      if (usable(candidates[index] as Candidate)) return { index, reason: "round-robin", matched: 0 };
    }
    return null;
  },
};
