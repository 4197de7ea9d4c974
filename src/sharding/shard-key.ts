import { forgetOldest } from "../routing/forget-oldest.ts";

/** A prompt's first blocks name it when nothing deeper is known: 4 blocks, 256 characters at the default block size. */
const ROOT_BLOCKS = 4;
/** Blocks kept of the last prompt seen under a key, past the key: prompts that part further in are not told apart. */
const WINDOW_BLOCKS = 512;
/** Keys remembered: branch points, and the last prompt under each key (≤ 4 KB each: 4 MB at most). */
const MAX_BRANCHES = 4096;
const MAX_LAST = 1024;

/**
 * Which prefix of a prompt decides its shard. Its first blocks alone would not do: prompts that
 * share a system prompt — every conversation of an app — share them, so they would all go to one
 * shard, spilling from it at random as its load allows and losing each conversation's cache on
 * the way. The key is instead the first block past the prefix the prompt shares with others: the
 * point where prompts that start alike part (a branch point of the prefix tree). A conversation's
 * turns each extend the last, so they part from the others at the same block and keep one key,
 * and one shard; while prompts that share everything up to their end (a hot prefix) share a key,
 * which bounded loads spread over the shards.
 *
 * Branch points are learned from the prompts this isolate routes: under each key, the last prompt
 * seen there is compared with the next (one binary search: equal hashes mean equal prefixes); two
 * that part before either ends mark where prompts under that key part. That happens a few times
 * per shared prefix, so a new system prompt costs a few requests keyed by their first blocks.
 * Bounded: the tables forget their oldest entries.
 */
export class ShardKeys {
  /** Key (a chain hash) → how many blocks the prompts under it share before they part; most recently used last. */
  private readonly branches = new Map<number, number>();
  /**
   * Key → the blocks of the last prompt routed under it that come after the key (a key sits at
   * one depth, so they line up), at most WINDOW_BLOCKS: ≤ 4 KB an entry whatever the prompt.
   */
  private readonly last = new Map<number, readonly number[]>();

  /** The prompt's key (NaN for an empty chain), learning from it. */
  keyOf(chain: readonly number[]): number {
    if (chain.length === 0) return NaN;
    let at = Math.min(ROOT_BLOCKS, chain.length) - 1;
    let key = chain[at] as number;
    for (let shared = this.branches.get(key); shared !== undefined && shared < chain.length; shared = this.branches.get(key)) {
      // Used: kept longest (a system prompt in use is not the one forgotten).
      this.branches.delete(key);
      this.branches.set(key, shared);
      at = shared;
      key = chain[at] as number;
    }
    this.learn(key, at + 1, chain);
    return key;
  }

  /** Entries held, for tests of the bounds. */
  get size(): { branches: number; last: number } {
    return { branches: this.branches.size, last: this.last.size };
  }

  /** `from`: the blocks the key covers. */
  private learn(key: number, from: number, chain: readonly number[]): void {
    const prev = this.last.get(key);
    if (prev) {
      const shared = from + commonBlocks(chain, from, prev);
      // Parted before either ended: not a conversation's next turn (which holds the last whole), not a retry.
      if (shared < chain.length && shared < from + prev.length) {
        const known = this.branches.get(key);
        if (known === undefined || shared < known) {
          if (known === undefined && this.branches.size >= MAX_BRANCHES) forgetOldest(this.branches, MAX_BRANCHES >> 3);
          this.branches.set(key, shared);
        }
      }
      this.last.delete(key);
    } else if (this.last.size >= MAX_LAST) forgetOldest(this.last, MAX_LAST >> 3);
    this.last.set(key, chain.slice(from, from + WINDOW_BLOCKS));
  }
}

/** How many of `tail`'s blocks `chain` has from `from` on: equal hashes cover equal prefixes, so a binary search finds it. */
function commonBlocks(chain: readonly number[], from: number, tail: readonly number[]): number {
  let lo = 0;
  let hi = Math.min(chain.length - from, tail.length);
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (chain[from + mid - 1] === tail[mid - 1]) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
