import { forgetOldest } from "./forget-oldest.ts";
import { decayed } from "./half-life.ts";

/**
 * How often recent requests matched a given prefix, as an exponentially decaying score per block
 * hash. A prefix that many requests share (a common system prompt, a popular document) is hot:
 * it pays to hold it on several backends, so requests for it are spread by load. A prefix only
 * one conversation extends (its own history) is never hot, so the conversation stays put.
 * Bounded: the least recently hit hashes are forgotten first.
 *
 * Beside the scores, the same decaying count of the group's new prompts (those that start a
 * conversation or match a shared prefix, as against a conversation coming back): what a prefix's
 * score is a share of.
 *
 * The half-life is each call's, its caller's config version's (hotHalfLifeMs): a score is kept as
 * of its last hit and decayed only when read, so a version with another half-life decays what is
 * there from then on by its own, and the counts stay shared.
 */
export class HotPrefixes {
  private readonly scores = new Map<number, { score: number; at: number }>();
  private readonly capacity: number;
  private newPrompts = 0;
  private newPromptsAt = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  /** Prefixes remembered. */
  get size(): number {
    return this.scores.size;
  }

  /** Records a request matching the prefix that ends at `hash`; returns its score, this hit included. */
  hit(hash: number, now: number, halfLifeMs: number): number {
    const prev = this.scores.get(hash);
    let score = 1;
    if (prev) {
      score += decayed(prev.score, now - prev.at, halfLifeMs);
      this.scores.delete(hash);
    } else if (this.scores.size >= this.capacity) {
      // The least recently hit eighth at once: most requests' prefix is a conversation's own,
      // new each turn, so this runs on most requests (src/routing/forget-oldest.ts).
      forgetOldest(this.scores, Math.max(1, this.capacity >> 3));
    }
    this.scores.set(hash, { score, at: now });
    return score;
  }

  /** Counts a new prompt; returns the count, this one included. */
  newPrompt(now: number, halfLifeMs: number): number {
    this.newPrompts = decayed(this.newPrompts, now - this.newPromptsAt, halfLifeMs) + 1;
    this.newPromptsAt = now;
    return this.newPrompts;
  }
}
