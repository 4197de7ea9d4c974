import { SharedBound, type SharingTable } from "./shared-bound.ts";

/** Keys remembered per isolate, over every sharded group, each with where its recent prompts went: only keys one of whose prompts went to another shard than the key's own. */
const MAX_KEYS = 1024;
/**
 * A key's placements remembered, newest last: one per recent conversation under it, as a prompt
 * that extends an earlier one (its next turn) takes that one's place. With 8 (any prompts), a key
 * that many Mooncake conversations shared (their first 512-token block, one of many such
 * prefixes) had placed more than 8 others before a 71k-token conversation came back 49 s later:
 * its history's placement was gone, it went to its key's own shard and found 528 tokens cached
 * instead of 70k, and over 4 shards that slice kept 0.79 × one object's kv_hit.
 */
const PER_KEY = 32;
/** Placements remembered per isolate, over every key of every sharded group: ~2 MB at most (≤ 22 hashes each). */
const MAX_PLACEMENTS = 8192;

/** The isolate's bounds on every group's KeyPlacements (ShardChoice holds one pair). */
export interface PlacementBounds {
  keys: SharedBound;
  placements: SharedBound;
}

export function placementBounds(): PlacementBounds {
  return { keys: new SharedBound(MAX_KEYS), placements: new SharedBound(MAX_PLACEMENTS) };
}

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
 * within a third. Bounded: MAX_KEYS keys, PER_KEY placements a key, MAX_PLACEMENTS in all, over
 * the isolate's sharded groups (SharedBound: the group holding most placements forgets first).
 */
export class KeyPlacements implements SharingTable {
  /** Key → its recent placements, oldest first; keys most recently placed last. */
  private readonly byKey = new Map<number, Placement[]>();
  /** Placements over every key: the lists' lengths added up. */
  private count = 0;
  private readonly bounds: PlacementBounds;
  /** Whether the isolate's placements are past where forgetting stops: an eighth of each bound free. */
  private readonly pastRoom: () => boolean;

  /** `bounds`: the isolate's, shared with its other sharded groups' KeyPlacements; a pair of its own by default. */
  constructor(bounds: PlacementBounds = placementBounds()) {
    this.bounds = bounds;
    const { keys, placements } = bounds;
    this.pastRoom = () => keys.held >= keys.max - (keys.max >> 3) || placements.held > placements.max - (placements.max >> 3);
    placements.join(this);
  }

  /** Takes what it holds off the isolate's bounds: its group is no longer a sharded group of the fleet. */
  release(): void {
    this.bounds.keys.held -= this.byKey.size;
    this.bounds.placements.leave(this);
  }

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
    const old = this.byKey.get(key);
    if (!old && shard === own) return;
    const { keys, placements } = this.bounds;
    let list: Placement[] = [];
    if (old) {
      this.byKey.delete(key);
      this.count -= old.length;
      keys.held--;
      placements.held -= old.length;
      // A prompt that holds an earlier one whole (a conversation's next turn) stands for it from now on.
      list = old.filter((p) => !holdsWhole(chain, p));
    }
    list.push(marks(chain, at, shard));
    if (list.length > PER_KEY) list.shift();
    // Every recent prompt went home: the key's own shard is where the next goes anyway.
    if (list.every((p) => p.shard === own)) return;
    this.count += list.length;
    placements.held += list.length;
    if (keys.held >= keys.max || placements.held > placements.max) placements.makeRoom(this.pastRoom);
    this.byKey.set(key, list);
    keys.held++;
  }

  /** Placements held over every key (SharingTable). */
  get held(): number {
    return this.count;
  }

  /**
   * Forgets the keys least recently placed while `over()` (until an eighth of each of the isolate's
   * bounds is free), an eighth of its keys at most: at once, as forget-oldest.ts says why.
   */
  shed(over: () => boolean): void {
    const { keys, placements } = this.bounds;
    let left = Math.max(1, this.byKey.size >> 3);
    for (const [key, list] of this.byKey) {
      if (left-- === 0 || !over()) return;
      this.byKey.delete(key);
      this.count -= list.length;
      keys.held--;
      placements.held -= list.length;
    }
  }

  /** Keys held, for tests of the bounds. */
  get size(): number {
    return this.byKey.size;
  }

  /** Placements held over every key, for tests of the bounds. */
  get placements(): number {
    return this.count;
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

/** Whether `chain` holds the placement's prompt whole: it has the prompt's last hash at its last block (sharedDepth's first test). */
function holdsWhole(chain: readonly number[], p: Placement): boolean {
  return p.last > p.at && p.last < chain.length && chain[p.last] === p.hashes[p.hashes.length - 1];
}
