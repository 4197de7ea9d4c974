import { forgetOldest } from "../routing/forget-oldest.ts";

/** A prompt's first blocks name it when nothing deeper is known: 4 blocks, 256 characters at the default block size. */
const ROOT_BLOCKS = 4;
/** Blocks kept of the last prompt seen under a key, past the key: prompts that part further in are not told apart. */
const WINDOW_BLOCKS = 512;
/** Keys remembered: branch points, and the last prompt under each key (up to ~16 KB each: 4 MB at most). */
const MAX_BRANCHES = 4096;
const MAX_LAST = 256;

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
  /** Key (a chain hash) → how many blocks the prompts under it share before they part. */
  private readonly branches = new Map<number, number>();
  /** Key → the leading blocks of the last prompt routed under it. */
  private readonly last = new Map<number, readonly number[]>();

  /** The prompt's key (NaN for an empty chain), learning from it. */
  keyOf(chain: readonly number[]): number {
    if (chain.length === 0) return NaN;
    let at = Math.min(ROOT_BLOCKS, chain.length) - 1;
    let key = chain[at] as number;
    for (let shared = this.branches.get(key); shared !== undefined && shared < chain.length; shared = this.branches.get(key)) {
      at = shared;
      key = chain[at] as number;
    }
    this.learn(key, at, chain);
    return key;
  }

  /** Entries held, for tests of the bounds. */
  get size(): { branches: number; last: number } {
    return { branches: this.branches.size, last: this.last.size };
  }

  private learn(key: number, at: number, chain: readonly number[]): void {
    const prev = this.last.get(key);
    if (prev) {
      const shared = commonBlocks(chain, prev, at + 1);
      // Parted before either ended: not a conversation's next turn (which holds the last whole), not a retry.
      if (shared < chain.length && shared < prev.length) {
        const known = this.branches.get(key);
        if (known === undefined || shared < known) {
          if (known === undefined && this.branches.size >= MAX_BRANCHES) forgetOldest(this.branches, MAX_BRANCHES >> 3);
          this.branches.set(key, shared);
        }
      }
      this.last.delete(key);
    } else if (this.last.size >= MAX_LAST) forgetOldest(this.last, MAX_LAST >> 3);
    // The request's own chain when it is short enough: it is not changed after it is made.
    this.last.set(key, chain.length <= at + 1 + WINDOW_BLOCKS ? chain : chain.slice(0, at + 1 + WINDOW_BLOCKS));
  }
}

/** Leading blocks `a` and `b` have in common, knowing they share the first `from`: equal hashes cover equal prefixes, so a binary search finds it. */
function commonBlocks(a: readonly number[], b: readonly number[], from: number): number {
  let lo = from;
  let hi = Math.min(a.length, b.length);
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (a[mid - 1] === b[mid - 1]) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
