import { forgetOldest } from "../routing/forget-oldest.ts";

/** Keys remembered, each with where its recent prompts went: only keys one of whose prompts went to another shard than the key's own. */
const MAX_KEYS = 1024;
/** A key's placements remembered, newest last. */
const PER_KEY = 8;

/** Where one prompt under a key went, and marks of its chain to tell how far another prompt shares it. */
interface Placement {
  shard: number;
  /** The key's position in the chain, and the chain's last. */
  at: number;
  last: number;
  /**
   * The chain's hash at each mark past the key (markAt), and at its last block: a hash covers
   * every block up to it, so equal hashes at a position mean equal prefixes up to it.
   */
  hashes: number[];
}

/** The `m`th mark's distance past the key: 1, 2, 3, 4, 6, 8, 12, 16, 24, … (each power of two and one and a half times it). */
function markAt(m: number): number {
  if (m === 0) return 1;
  const k = (m + 1) >> 1;
  return m % 2 === 1 ? 2 ** k : 3 * 2 ** (k - 1);
}

/**
 * Where the prompts under a shard key went, when one of them went elsewhere than the key's own
 * shard, so a prompt follows the one it shares most with. A key is a prompt's first block past
 * the prefixes it shares with the group's busiest (ShardKey); under it the prompts of one app, a
 * conversation's turns or a trace's documents on one opening part further in, and one shard can
 * hold one's history while another holds the next's. A key's last placement alone sent every
 * prompt under it after the last one that moved: on the Mooncake trace over 2 shards, prompts
 * that shared 1k tokens with it and 24k with one at home followed it and lost their cache.
 *
 * A placement keeps its chain's hashes at a few depths past the key (markAt) and at its last
 * block — at most 22 numbers whatever the prompt's length — so a common prefix's depth is known to
 * within a third. Bounded: MAX_KEYS keys × PER_KEY placements, ~2 MB at most.
 */
export class KeyPlacements {
  /** Key → its recent placements, oldest first; keys most recently placed last. */
  private readonly byKey = new Map<number, Placement[]>();

  /**
   * The shard of the placement under `key` whose prompt shares most of `chain` past the key's
   * position `at` (the newest of equals); -1 when none shares a block past it: the key's own
   * shard is as good as any then.
   */
  follow(key: number, at: number, chain: readonly number[]): number {
    const list = this.byKey.get(key);
    if (!list) return -1;
    let best = -1;
    let deepest = at;
    for (let p = list.length - 1; p >= 0; p--) {
      const placement = list[p] as Placement;
      const depth = sharedDepth(placement, chain);
      if (depth > deepest) {
        deepest = depth;
        best = placement.shard;
      }
    }
    return best;
  }

  /** The prompt `chain` under `key` (at position `at`) took a lease on `shard`; `own`: the key's own shard. */
  placed(key: number, at: number, chain: readonly number[], shard: number, own: number): void {
    let list = this.byKey.get(key);
    if (!list) {
      if (shard === own) return;
      if (this.byKey.size >= MAX_KEYS) forgetOldest(this.byKey, MAX_KEYS >> 3);
      list = [];
    }
    this.byKey.delete(key);
    list.push(marks(chain, at, shard));
    if (list.length > PER_KEY) list.shift();
    // Every recent prompt went home: the key's own shard is where the next goes anyway.
    if (list.every((p) => p.shard === own)) return;
    this.byKey.set(key, list);
  }

  /** Keys held, for tests of the bound. */
  get size(): number {
    return this.byKey.size;
  }
}

function marks(chain: readonly number[], at: number, shard: number): Placement {
  const last = chain.length - 1;
  const hashes: number[] = [];
  for (let m = 0; at + markAt(m) < last; m++) hashes.push(chain[at + markAt(m)] as number);
  if (last > at) hashes.push(chain[last] as number);
  return { shard, at, last, hashes };
}

/** The deepest marked position at which `chain` has the placement's hash (the prefixes are equal up to it); -1 for none. */
function sharedDepth(p: Placement, chain: readonly number[]): number {
  const n = p.hashes.length;
  for (let m = n - 1; m >= 0; m--) {
    const i = m === n - 1 ? p.last : p.at + markAt(m);
    if (i < chain.length && chain[i] === p.hashes[m]) return i;
  }
  return -1;
}
