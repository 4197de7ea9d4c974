/**
 * A backend's effective KV capacity, in hash blocks, learned from what it reports as cached
 * against what its prefix set predicted. The set is an LRU of what routing sent there, sized by
 * the configured kvCapacityBlocks; the engine's real cache is an LRU too (of prompts and answers,
 * less what running sequences pin). When the set is the larger, it still holds chains the engine
 * evicted: the engine reports fewer cached tokens than the set matched. When it is the smaller,
 * the set has evicted chains the engine still holds: the engine reports more than the set matched
 * — seen only while the set is full, since a set that never evicted forgot nothing.
 *
 * A report is a vote, −1 (shrink), +1 (grow) or none, with a dead band for what is no evidence:
 * the engine's block granularity, the chars-per-token estimate's error, and on the grow side the
 * previous turn's answer, which the engine caches and the router never hashed (the request's own
 * completion stands in for its size). The request itself prefilled its prompt, so the lesson is
 * about the set's size and recency, never about that chain. Votes feed a pressure (an exponential
 * mean over votes, neutral reports left out: a workload with few evictions should learn as surely
 * as a busy one, only slower); past ±THRESHOLD (four votes the same way in a row) the capacity
 * takes one multiplicative step and the pressure starts over, so the effect of a step is seen
 * before the next. Steps start at ×2, halve (in log) each time the direction turns, down to
 * ×2^(1/4), and double again while it keeps its direction, as Rprop does: a configuration 4× off
 * is two steps from right, and the learner then settles within a small step of the engine's
 * capacity instead of hopping by ×2 around it, yet follows a backend whose capacity moves. One
 * odd report moves the pressure by 1/6 and never steps on its own; the capacity stays within
 * 1/16× to 16× of the configured value.
 *
 * A miss weighs by where the set held the chain. One the set was about to evict too says only
 * that the engine holds a little less than the set, and that costs routing nothing: a set a
 * little too big predicts a few hits that miss, where one too small forgets what the engine
 * still holds and sends it elsewhere to be prefilled again (llm-d's b2b-saas in virtual time,
 * seed 1, kept 0.935–0.936 of the ceiling's kv_hit at kvCapacityBlocks × 1 to × 2, 0.81 at
 * × 0.7). And near its tail the engine's order parts from the set's — it caches a prompt when
 * admitted, not routed, and holds every answer besides — so misses at the set's tail come in a
 * steady stream even at the right capacity: on b2b-saas they walked it down by half and kv_hit
 * with it (0.936 → 0.890, the prefill rate held). So a miss votes to shrink only when its match
 * was younger than half the set's oldest chain end, in learns (PrefixSet.matchRecency <
 * OLD_MATCH). In places down the eviction order that is half way where chains come back in turn,
 * further where many come back at random: from too big, the capacity comes down to within 2× of
 * the engine's (test/e2e/routing-feedback.test.ts: 320 blocks against 160).
 */

import { LearnedFigure } from "./bounded.ts";

const PRESSURE_WEIGHT = 1 / 6;
const THRESHOLD = 0.5;
/** Steps in log2: the first ×2, the smallest ×2^(1/4). */
const FIRST_STEP = 1;
const MIN_STEP = 1 / 4;
/** The furthest it moves from the configured capacity, either way. */
export const CAPACITY_RANGE = 16;
/** A set this full is evicting. */
const FULL = 0.9;
/** A miss on a match at least this old (its age over the set's oldest chain end's) is no evidence to shrink. */
const OLD_MATCH = 1 / 2;

export interface CapacityReport {
  /** Leading blocks of the chain the set matched when the request was routed. */
  matched: number;
  /** The chain's blocks. */
  total: number;
  /** The backend's cached tokens, in blocks (by the learned characters per token). */
  cachedBlocks: number;
  /** The request's completion, in blocks: the likely size of a previous answer the engine holds beyond the set. */
  answerBlocks: number;
  /** The set's size and capacity when the report came. */
  setSize: number;
  setCapacity: number;
  /** Where the set held the match in its eviction order when routed: 0 just used, ~1 about to go (PrefixSet.matchRecency); NaN when unknown. */
  recency: number;
}

/** −1: the engine holds less than the set matched, and the set had not got to evicting it; +1: more, while the set evicts; 0: no evidence. */
export function capacityVote(r: CapacityReport): -1 | 0 | 1 {
  const slack = 1 + 0.03 * r.total;
  if (r.cachedBlocks < r.matched - slack) return r.recency >= OLD_MATCH ? 0 : -1;
  if (r.cachedBlocks > r.matched + slack + 1.5 * r.answerBlocks && r.setSize >= FULL * r.setCapacity) return 1;
  return 0;
}

export class KvCapacityLearner {
  private readonly figure: LearnedFigure;
  pressure = 0;
  steps = 0;
  private step = FIRST_STEP;
  private lastDirection = 0;

  constructor(configured: number) {
    this.figure = new LearnedFigure(configured, CAPACITY_RANGE, true);
  }

  get blocks(): number {
    return this.figure.value;
  }

  get configuredBlocks(): number {
    return this.figure.configuredValue;
  }

  /** What it learned, or null while the configured capacity holds. */
  get learnedBlocks(): number | null {
    return this.figure.learnedValue;
  }

  /** A new configured value: what was learned stays, within the new bounds. */
  configure(configured: number): void {
    this.figure.configure(configured);
  }

  /** True when the capacity stepped. */
  observe(r: CapacityReport): boolean {
    const vote = capacityVote(r);
    if (vote === 0) return false;
    this.pressure += (vote - this.pressure) * PRESSURE_WEIGHT;
    if (Math.abs(this.pressure) < THRESHOLD) return false;
    const direction = this.pressure > 0 ? 1 : -1;
    this.step = this.lastDirection === -direction ? Math.max(MIN_STEP, this.step / 2) : Math.min(FIRST_STEP, this.step * 2);
    this.lastDirection = direction;
    const stepped = this.figure.set(this.blocks * 2 ** (direction * this.step));
    this.pressure = 0;
    if (stepped) this.steps++;
    return stepped;
  }

  restore(blocks: number): void {
    this.figure.restore(blocks);
  }
}
