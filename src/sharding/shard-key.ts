import { forgetOldest } from "../routing/forget-oldest.ts";

/** A prompt's first blocks name it when nothing deeper is known: 4 blocks, 256 characters at the default block size. */
const ROOT_BLOCKS = 4;
/** Blocks kept of the last prompt seen under a key, past the key: prompts that part further in are not told apart. */
const WINDOW_BLOCKS = 512;
/** Keys remembered: branch points, and the last prompt under each key (≤ 4 KB each: 4 MB at most). */
const MAX_BRANCHES = 4096;
const MAX_LAST = 1024;

/** A request's weight in a key's heat halves over this many of the isolate's requests of the group. */
const HEAT_HALF_LIFE = 256;
const HEAT_DECAY = 0.5 ** (1 / HEAT_HALF_LIFE);

/** Where the prompts under a key part, and how much of the isolate's traffic passes through it. */
interface Branch {
  /** Blocks the prompts under the key share before they part. */
  shared: number;
  /** Requests that passed through the key, each weighing HEAT_DECAY ** (requests of the group since). */
  heat: number;
  /** `seen` when heat was last brought up to date. */
  at: number;
  /** Whether its prompts are keyed past it: once so, until its share falls below half a shard's. */
  split: boolean;
}

/**
 * Which prefix of a prompt decides its shard. Its first blocks alone would not do: prompts that
 * share a system prompt — every conversation of an app — share them, so they would all go to one
 * shard, spilling from it at random as its load allows and losing each conversation's cache on
 * the way. The key is instead the first block past the prefix the prompt shares with others (a
 * branch point of the prefix tree) — but only past a prefix that carries more than a shard's share
 * of the group's requests. A conversation's turns each extend the last, so they part from the
 * others at the same block and keep one key, and one shard. A prefix no busier than a shard's
 * share keys everything under it, wherever its prompts part further in: one of many group
 * prompts keeps its questions together, where its cache is, and a conversation whose question
 * was edited or regenerated stays where its history is (keying deeper would move its next turns
 * to a shard that holds none of it). Prompts that share everything up to their end (a hot
 * prefix) share a key, which bounded loads spread over the shards.
 *
 * Branch points are learned from the prompts this isolate routes: under each key, the last prompt
 * seen there is compared with the next (one binary search: equal hashes mean equal prefixes); two
 * that part before either ends mark where prompts under that key part. That happens a few times
 * per shared prefix, so a new system prompt costs a few requests keyed by their first blocks.
 * A branch's heat is a decaying count of the requests through it, against the same decaying count
 * of all the group's requests here; a prefix keyed past stays so until its share falls below half
 * a shard's. Bounded: the tables forget their oldest entries.
 */
export class ShardKeys {
  /** Key (a chain hash) → where the prompts under it part, and its heat; most recently used last. */
  private readonly branches = new Map<number, Branch>();
  /**
   * Key → the blocks of the last prompt routed under it that come after the key (a key sits at
   * one depth, so they line up), at most WINDOW_BLOCKS: ≤ 4 KB an entry whatever the prompt.
   */
  private readonly last = new Map<number, readonly number[]>();
  /** Requests keyed so far, the clock heat decays by. */
  private seen = 0;
  /** Every request's weight summed, decayed as a branch's heat is: what a branch's heat is a share of. */
  private total = 0;

  /** The prompt's key among `shards` shards (NaN for an empty chain), learning from it. */
  keyOf(chain: readonly number[], shards: number): number {
    if (chain.length === 0) return NaN;
    this.seen++;
    this.total = this.total * HEAT_DECAY + 1;
    let at = Math.min(ROOT_BLOCKS, chain.length) - 1;
    let key = chain[at] as number;
    for (let b = this.branches.get(key); b !== undefined && b.shared < chain.length; b = this.branches.get(key)) {
      // Used: kept longest (a system prompt in use is not the one forgotten).
      this.branches.delete(key);
      this.branches.set(key, b);
      b.heat = b.heat * HEAT_DECAY ** (this.seen - b.at) + 1;
      b.at = this.seen;
      // Between half a shard's share and a whole one it keeps its last keying: a prefix whose share
      // wavers about the bar would otherwise move its conversations between shards each time.
      b.split = b.heat * shards > (b.split ? 0.5 : 1) * this.total;
      if (!b.split) break;
      at = b.shared;
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
        if (known === undefined) {
          if (this.branches.size >= MAX_BRANCHES) forgetOldest(this.branches, MAX_BRANCHES >> 3);
          // The two prompts that showed the branch have passed through it.
          this.branches.set(key, { shared, heat: 2, at: this.seen, split: false });
        } else if (shared < known.shared) known.shared = shared;
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
