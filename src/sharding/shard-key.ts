import { forgetOldest } from "../routing/forget-oldest.ts";
import { decayed } from "../routing/half-life.ts";
import { SharedBound, type SharingTable } from "./shared-bound.ts";

/** A prompt's first blocks name it when nothing deeper is known: 4 blocks, 256 characters at the default block size. */
const ROOT_BLOCKS = 4;
/** Blocks kept of the last prompt seen under a key, past the key: prompts that part further in are not told apart. */
const WINDOW_BLOCKS = 512;
/** Keys remembered per isolate, over every sharded group: branch points, and the last prompt under each key (≤ 4 KB each: 4 MB at most). */
const MAX_BRANCHES = 4096;
const MAX_LAST = 1024;

/** The isolate's bounds on every group's ShardKeys' tables (ShardChoice holds one pair). */
export interface ShardKeyBounds {
  branches: SharedBound;
  last: SharedBound;
}

export function shardKeyBounds(): ShardKeyBounds {
  return { branches: new SharedBound(MAX_BRANCHES), last: new SharedBound(MAX_LAST) };
}

/**
 * A request's weight in a key's heat halves over this many of the isolate's requests of the group.
 * Long enough that a few requests in a row on one of many prefixes do not make it look like a
 * shard's share; short enough that a new prefix taking all the traffic shows as one soon: after
 * HEAT_HALF_LIFE × log2(S / (S − 1)) requests over S shards — 256 at 2, 106 at 4, 49 at 8.
 */
const HEAT_HALF_LIFE = 256;

/** A prompt's shard key, and how far into it the key sits. */
export interface ShardKey {
  /** A chain hash; NaN for an empty chain. */
  key: number;
  /** The key's position in the chain: the prompts under the key share every block up to it. */
  at: number;
  /**
   * Leading blocks of the prompt under prefixes busier than a shard's share, which the key went
   * past: a system prompt its app's conversations share. Their prompts are spread over every
   * shard, so every shard is taken to hold these blocks. 0 when the key is the prompt's first blocks.
   */
  spread: number;
}

/** A decaying count of the requests that passed a point, on the clock of the isolate's requests of the group. */
interface Heat {
  heat: number;
  /** `seen` when heat was last brought up to date. */
  at: number;
}

/** Counts one more request through `h`, at `now`. */
function pass(h: Heat, now: number): void {
  h.heat = decayed(h.heat, now - h.at, HEAT_HALF_LIFE) + 1;
  h.at = now;
}

/** Where the prompts under a key part, and how much of the isolate's traffic passes through it. */
interface Branch extends Heat {
  /** Blocks the prompts under the key share before they part. */
  shared: number;
  /** Whether its prompts are keyed past it: once so, until its share falls below half a shard's. */
  split: boolean;
}

/** The last prompt routed under a key, and the requests routed under it. */
interface Tail extends Heat {
  /** Its blocks after the key (a key sits at one depth, so they line up), at most WINDOW_BLOCKS: ≤ 4 KB whatever the prompt. */
  blocks: readonly number[];
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
 * that part before either ends mark where prompts under that key part. A key's heat is a decaying
 * count of the requests through it, against the same decaying count of all the group's requests
 * here; a prefix keyed past stays so until its share falls below half a shard's. A new prefix is
 * keyed by its first blocks until its share shows (HEAT_HALF_LIFE): a new system prompt that takes
 * all the traffic of a busy isolate, ~100 requests at 4 shards, after which the conversations
 * begun under it move once; in an isolate that starts with it, two. Bounded: the tables forget
 * their oldest entries, under bounds shared with the isolate's other sharded groups (SharedBound).
 */
export class ShardKeys {
  /** Key (a chain hash) → where the prompts under it part, and its heat; most recently used last. */
  private readonly branches = new Map<number, Branch>();
  /** Key → the last prompt routed under it, and its heat; most recently used last. */
  private readonly last = new Map<number, Tail>();
  /** Requests keyed so far: the clock heat decays by. */
  private seen = 0;
  /** Every request, decayed as a key's heat is: what a key's heat is a share of (never below it). */
  private readonly total: Heat = { heat: 0, at: 0 };
  private readonly bounds: ShardKeyBounds;
  private readonly branchTable: SharingTable;
  private readonly lastTable: SharingTable;

  /** `bounds`: the isolate's, shared with its other sharded groups' ShardKeys; a pair of its own by default. */
  constructor(bounds: ShardKeyBounds = shardKeyBounds()) {
    this.bounds = bounds;
    this.branchTable = sharing(this.branches, bounds.branches);
    this.lastTable = sharing(this.last, bounds.last);
    bounds.branches.join(this.branchTable);
    bounds.last.join(this.lastTable);
  }

  /** Takes what it holds off the isolate's bounds: its group is no longer a sharded group of the fleet. */
  release(): void {
    this.bounds.branches.leave(this.branchTable);
    this.bounds.last.leave(this.lastTable);
  }

  /**
   * The prompt's key among `shards` shards taking requests, learning from it. Each call counts as
   * a request: a retry's second call too, as it is more load there.
   */
  keyOf(chain: readonly number[], shards: number): ShardKey {
    if (chain.length === 0) return { key: NaN, at: -1, spread: 0 };
    pass(this.total, ++this.seen);
    let at = Math.min(ROOT_BLOCKS, chain.length) - 1;
    let key = chain[at] as number;
    let spread = 0;
    for (let b = this.branches.get(key); b !== undefined && b.shared < chain.length; b = this.branches.get(key)) {
      // Used: kept longest (a system prompt in use is not the one forgotten).
      this.branches.delete(key);
      this.branches.set(key, b);
      pass(b, this.seen);
      // Between half a shard's share and a whole one it keeps its last keying: a prefix whose share
      // wavers about the bar would otherwise move its conversations between shards each time.
      b.split = b.heat * shards > (b.split ? 0.5 : 1) * this.total.heat;
      if (!b.split) break;
      spread = at = b.shared;
      key = chain[at] as number;
    }
    this.learn(key, at + 1, chain);
    return { key, at, spread };
  }

  /** Entries held, for tests of the bounds. */
  get size(): { branches: number; last: number } {
    return { branches: this.branches.size, last: this.last.size };
  }

  /** `from`: the blocks the key covers. */
  private learn(key: number, from: number, chain: readonly number[]): void {
    const blocks = chain.slice(from, from + WINDOW_BLOCKS);
    const prev = this.last.get(key);
    if (!prev) {
      this.bounds.last.roomForOne();
      this.last.set(key, { blocks, heat: 1, at: this.seen });
      this.bounds.last.held++;
      return;
    }
    pass(prev, this.seen);
    const shared = from + commonBlocks(chain, from, prev.blocks);
    // Parted before either ended: not a conversation's next turn (which holds the last whole), not a retry.
    if (shared < chain.length && shared < from + prev.blocks.length) {
      const known = this.branches.get(key);
      if (known === undefined) {
        this.bounds.branches.roomForOne();
        // The requests under the key so far are its heat: a prefix that carried the traffic before its prompts parted is split at once.
        this.branches.set(key, { shared, heat: prev.heat, at: this.seen, split: false });
        this.bounds.branches.held++;
      } else if (shared < known.shared) known.shared = shared;
    }
    prev.blocks = blocks;
    this.last.delete(key);
    this.last.set(key, prev);
  }
}

/** `table` under `bound`: it forgets an eighth of itself at once, its least recently used (forget-oldest.ts says why). */
function sharing<K, V>(table: Map<K, V>, bound: SharedBound): SharingTable {
  return {
    get held() {
      return table.size;
    },
    shed() {
      const before = table.size;
      forgetOldest(table, Math.max(1, before >> 3));
      bound.held -= before - table.size;
    },
  };
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
