/**
 * The block hashes recently sent to one backend: an approximation of what its KV cache holds.
 * Bounded, least recently used out first.
 *
 * Kept as a prefix tree: each block knows its parent (the block before it in the chain), and
 * eviction takes only leaves — the oldest chain end first; a block whose last child goes becomes
 * a leaf itself. So the set is prefix-closed by construction (if h[i] is present so is every
 * h[j < i]), the longest leading match is a binary search, and learning a chain costs the search
 * plus its new blocks: the blocks it shares with what is held are not touched again, only the
 * deepest one (a turn of a conversation adds a few blocks to hundreds).
 *
 * Kept in typed arrays (a hash table with doubly linked buckets, and a doubly linked list of the
 * leaves, over slots), not a Map: an entry costs 36–40 bytes in any V8 (a 32-byte slot and its
 * bucket), where a Map of 53-bit keys costs ~45 in workerd and ~71 in Node, each key a heap number
 * the garbage collector walks. Arrays grow by doubling up to the capacity and shrink with it.
 *
 * A route call's cost is memory fetches: a busy group's sets span tens of MiB, more than a cache
 * holds. So a match tries the lengths other backends matched before its binary search (`match`'s
 * guesses), a learn takes routing's match as its guess, and an eviction unlinks its slot from its
 * bucket in place instead of walking the bucket to it.
 *
 * How near its eviction a matched chain was (`matchRecency`) is read off the stamps it keeps
 * anyway: its deepest block's age in learns over the oldest leaf's. The feedback's capacity
 * learner weighs an engine's miss by it (src/routing/learned/kv-capacity.ts).
 */

/** What one `learn` added, to be taken back if the request fails: the new blocks, deepest last. */
export interface Lesson {
  /** The deepest block of the chain learned. */
  tip: number;
  /** How many blocks, up from the tip, were new. */
  blocks: number;
  stamp: number;
}

const NONE = -1;
/** In `newer`: the slot has children (or is being given one), and `older` holds how many. */
const INTERIOR = -2;
const MIN_SLOTS = 1024;
const STAMP_LIMIT = 0xffffffff;
/**
 * The first number of a snapshot: its format. Not an integer, as no hash is, nor any entry of the
 * first format (hashes, oldest first, an interior one as −(hash + 1)), which is not loaded.
 */
const SNAPSHOT_FORMAT = 2.5;

export class PrefixSet {
  private keys!: Float64Array;
  private parent!: Int32Array;
  /**
   * Which learn last ended at the block or branched from it (or, once eviction left it a leaf,
   * its evicted child's): what `unlearn` checks, and a block's age.
   */
  private stamps!: Uint32Array;
  /** While the slot is a leaf: its neighbours in the leaf list. While it has children: INTERIOR in `newer`, their number in `older`. */
  private older!: Int32Array;
  private newer!: Int32Array;
  /** The next slot in the same bucket, or in the free list. */
  private next!: Int32Array;
  /** The previous slot in the same bucket, or NONE for the bucket's first: an evicted slot leaves its bucket without a walk. */
  private prev!: Int32Array;
  private buckets!: Int32Array;
  private shift = 0;
  /** Ends of the leaf list. */
  private oldest = NONE;
  private newest = NONE;
  private free = NONE;
  /** Slots below this were handed out at least once. */
  private used = 0;
  private count = 0;
  private stamp = 0;
  /** The slot of the last block `match` found: the deepest of the match. */
  private matchedSlot = NONE;
  private cap: number;
  private readonly guess = [0];
  /** Where the last learn's match stood in the eviction order (matchRecency). */
  private lastRecency = NaN;

  constructor(capacity: number) {
    this.cap = capacity;
    this.allocate(Math.min(capacity, MIN_SLOTS));
  }

  get capacity(): number {
    return this.cap;
  }

  get size(): number {
    return this.count;
  }

  /**
   * Where the last learn's match stood in the eviction order before it was touched: its deepest
   * block's age in learns over the oldest leaf's, 0 the newest, ~1 next to go. NaN when nothing
   * matched.
   */
  get matchRecency(): number {
    return this.lastRecency;
  }

  /** Bytes its arrays hold: what the set costs, whatever the engine. */
  get bytes(): number {
    return this.keys.byteLength + this.parent.byteLength + this.stamps.byteLength + this.older.byteLength + this.newer.byteLength + this.next.byteLength + this.prev.byteLength + this.buckets.byteLength;
  }

  /** Number of leading blocks of `chain` present in the set. */
  match(chain: ArrayLike<number>, guesses?: ArrayLike<number>, guessCount = 0): number {
    let lo = 0;
    let hi = chain.length;
    let at = NONE;
    for (let k = 0; k < guessCount && lo < hi; k++) {
      const g = (guesses as ArrayLike<number>)[k] as number;
      if (g < lo || g > hi) continue;
      if (g > lo) {
        const s = this.find(chain[g - 1] as number);
        if (s === NONE) {
          hi = g - 1;
          continue;
        }
        lo = g;
        at = s;
      }
      if (g < hi) {
        const s = this.find(chain[g] as number);
        if (s === NONE) hi = g;
        else {
          lo = g + 1;
          at = s;
        }
      }
    }
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      const s = this.find(chain[mid - 1] as number);
      if (s !== NONE) {
        lo = mid;
        at = s;
      } else hi = mid - 1;
    }
    this.matchedSlot = at;
    return lo;
  }

  /**
   * Whether some held chain continues past this block. A match that ends at an interior block
   * ends where another prompt went on differently: the matched part is shared (a system prompt,
   * a document). A match that ends at a chain's last block is a conversation coming back.
   */
  isInterior(hash: number): boolean {
    const s = this.find(hash);
    return s !== NONE && this.newer[s] === INTERIOR;
  }

  /**
   * Learns the chain (its first `capacity` blocks); returns what was new, or null when nothing was.
   * `matched`: what this set's match of the chain likely is (routing just found it), a guess.
   */
  learn(chain: ArrayLike<number>, matched = -1): Lesson | null {
    const n = Math.min(chain.length, this.cap);
    if (n === 0) return null;
    this.guess[0] = matched;
    const m = this.match(chain, this.guess, matched < 0 ? 0 : 1);
    this.stamp = (this.stamp % STAMP_LIMIT) + 1;
    let p = this.matchedSlot;
    this.lastRecency = p === NONE ? NaN : p === this.newest ? 0 : this.ageOf(p) / Math.max(1, this.ageOf(this.oldest));
    if (p !== NONE) this.stamps[p] = this.stamp;
    let i = m;
    for (; i < n; i++) {
      const h = chain[i] as number;
      // Not looked up first: each hash covers its whole prefix, so a block past the longest match
      // is held nowhere in the set but by a 53-bit collision. A chain that is not a hash chain
      // (made-up blocks) gets a second slot for a held block: the estimate may err, the links
      // and counts stay whole. The lookup cost a quarter of a route call at 32 backends.
      // The parent gets its child first, so it and every block above it are interior: eviction,
      // which takes leaves only, cannot take the chain being learned.
      if (p !== NONE) this.adopt(p);
      if (this.count >= this.cap) this.evictOldest();
      // Nothing left to evict but the chain being learned: its match was found deeper in the set
      // than its own place in the chain (a block hash that collides with a deeper one's), so its
      // path is longer than the chain. It stops here, the set at its capacity: one block more
      // was written past the end of the arrays, and a bucket then linked to no slot sent every
      // later lookup in it round for ever.
      if (this.count >= this.cap) {
        this.disown(p);
        break;
      }
      p = this.add(h, p);
    }
    if (p === NONE) return null;
    if (i === m) {
      if (this.newer[p] !== INTERIOR) this.relinkNewest(p);
      return null;
    }
    // Unless it stopped short, when disown made it a chain end already.
    if (i === n) this.linkLeaf(p, true);
    return { tip: chain[i - 1] as number, blocks: i - m, stamp: this.stamp };
  }

  /**
   * Takes a lesson back: removes its blocks, deepest first, while no later learn went through
   * them — a block with children, or that a later learn ended at, stays, and so does everything
   * above it, so the set stays prefix-closed.
   */
  unlearn(lesson: Lesson): void {
    let s = this.find(lesson.tip);
    for (let k = 0; k < lesson.blocks && s !== NONE; k++) {
      if (this.newer[s] === INTERIOR || this.stamps[s] !== lesson.stamp) return;
      const p = this.parent[s] as number;
      // The block before the lesson was held before it and was just used: a recent leaf again.
      this.removeLeaf(s, true);
      s = p;
    }
  }

  /** Changes the capacity; a smaller one evicts the oldest entries and frees their memory. */
  resize(capacity: number): void {
    this.cap = capacity;
    while (this.count > capacity) this.evictOldest();
    if (this.keys.length > capacity) this.compact(Math.max(capacity, 1));
  }

  /** Every block, in the order eviction would take them (near enough: deepest of the oldest chain end first), for tests. */
  values(): number[] {
    const out: number[] = [];
    this.walkRecent(this.count, (_parent, path, take) => {
      for (let j = path.length - take; j < path.length; j++) out.push(this.keys[path[j] as number] as number);
    });
    return out.reverse();
  }

  /**
   * What eviction would take last, at most `max` blocks: prefix-closed too. Segments, newest
   * chain end first, each the ordinal of the block it hangs from (−1 for a root) within this
   * snapshot, the number of its blocks, and their hashes from the top down; after a format tag.
   * A block costs 8 bytes, a chain end 16 more.
   */
  exportRecent(max: number): Float64Array {
    const out: number[] = [SNAPSHOT_FORMAT];
    this.walkRecent(max, (parent, path, take) => {
      out.push(parent, take);
      for (let j = path.length - 1; j >= path.length - take; j--) out.push(this.keys[path[j] as number] as number);
    });
    return Float64Array.from(out);
  }

  /**
   * Loads what exportRecent wrote, the chain ends in the same recency order, as far as the
   * capacity goes (newest first: nothing is evicted for it). Returns the blocks loaded: none from
   * a snapshot of another format or one that does not read.
   */
  importRecent(saved: Float64Array): number {
    if (saved[0] !== SNAPSHOT_FORMAT) return 0;
    /** The slot each block of the snapshot was loaded into, by its ordinal. */
    const slots: number[] = [];
    let at = 1;
    while (at + 2 <= saved.length) {
      const from = saved[at] as number;
      const take = saved[at + 1] as number;
      at += 2;
      if (!Number.isInteger(from) || from < -1 || from >= slots.length || !Number.isInteger(take) || take < 1 || at + take > saved.length) break;
      // Each block hangs from the one its ordinal names, not from wherever its hash is held, and
      // takes a slot of its own, as learn gives it: a set given blocks that are not a hash chain
      // can hold a hash twice, and a lookup once hung a segment from the other one and linked a
      // block that had children as a chain end, whose eviction freed a slot still in use.
      let p = from < 0 ? NONE : (slots[from] as number);
      let added = false;
      for (let k = 0; k < take && this.count < this.cap; k++, at++) {
        if (p !== NONE) this.adopt(p);
        p = this.add(saved[at] as number, p);
        slots.push(p);
        added = true;
      }
      // Appended at the old end: the segments come newest first.
      if (added) this.linkLeaf(p, false);
      if (this.count >= this.cap) break;
    }
    return slots.length;
  }

  clear(): void {
    this.allocate(Math.min(this.cap, MIN_SLOTS));
    this.lastRecency = NaN;
  }

  /**
   * Visits the chain ends from the newest, each with the blocks above it not visited yet, until
   * `max` blocks: `path` runs from the chain end up, of which the top `take` count; `parent` is
   * the ordinal of the block they hang from among those visited (−1 for a root).
   */
  private walkRecent(max: number, visit: (parent: number, path: readonly number[], take: number) => void): void {
    const ordinal = new Map<number, number>();
    const path: number[] = [];
    for (let leaf = this.newest; leaf !== NONE && ordinal.size < max; leaf = this.older[leaf] as number) {
      path.length = 0;
      let s = leaf;
      while (s !== NONE && !ordinal.has(s)) {
        path.push(s);
        s = this.parent[s] as number;
      }
      const take = Math.min(path.length, max - ordinal.size);
      visit(s === NONE ? -1 : (ordinal.get(s) as number), path, take);
      for (let j = path.length - 1; j >= path.length - take; j--) ordinal.set(path[j] as number, ordinal.size);
    }
  }

  private find(h: number): number {
    for (let s = this.buckets[this.bucketOf(h)] as number; s !== NONE; s = this.next[s] as number) {
      if (this.keys[s] === h) return s;
    }
    return NONE;
  }

  /** Puts an absent hash in a slot under `parent`, with no place in the leaf list yet (interior, no children): the caller gives it a child or makes it a leaf. */
  private add(h: number, parent: number): number {
    let s: number;
    if (this.free !== NONE) {
      s = this.free;
      this.free = this.next[s] as number;
    } else {
      if (this.used === this.keys.length) this.grow(Math.min(this.cap, this.keys.length * 2));
      s = this.used++;
    }
    this.keys[s] = h;
    const b = this.bucketOf(h);
    const first = this.buckets[b] as number;
    this.next[s] = first;
    this.prev[s] = NONE;
    if (first !== NONE) this.prev[first] = s;
    this.buckets[b] = s;
    this.parent[s] = parent;
    this.stamps[s] = this.stamp;
    this.newer[s] = INTERIOR;
    this.older[s] = 0;
    this.count++;
    return s;
  }

  /** One more child for `s`: out of the leaf list if it was a leaf. */
  private adopt(s: number): void {
    if (this.newer[s] === INTERIOR) {
      this.older[s] = (this.older[s] as number) + 1;
      return;
    }
    this.unlinkLeaf(s);
    this.newer[s] = INTERIOR;
    this.older[s] = 1;
  }

  /** Takes back the child `adopt` just gave `s`, which it will not get: with no other child it is a chain end again, the newest. */
  private disown(s: number): void {
    if (s === NONE) return;
    const children = (this.older[s] as number) - 1;
    this.older[s] = children;
    if (children === 0) this.linkLeaf(s, true);
  }

  /** Evicts the oldest leaf. Its parent, if that was its last child, was kept only by it: the oldest leaf next. */
  private evictOldest(): void {
    if (this.oldest !== NONE) this.removeLeaf(this.oldest, false);
  }

  /** Removes a leaf; a parent left without children joins the leaf list at the new end or the old one. */
  private removeLeaf(s: number, parentAsNewest: boolean): void {
    this.unlinkLeaf(s);
    const before = this.prev[s] as number;
    const after = this.next[s] as number;
    if (before === NONE) this.buckets[this.bucketOf(this.keys[s] as number)] = after;
    else this.next[before] = after;
    if (after !== NONE) this.prev[after] = before;
    this.next[s] = this.free;
    this.free = s;
    this.count--;
    const p = this.parent[s] as number;
    if (p === NONE) return;
    const children = (this.older[p] as number) - 1;
    this.older[p] = children;
    if (children === 0) {
      // Evicted from the old end, its last child leaves it the next to go: it takes that child's
      // age with its place, not the older one of the last learn that stopped at it.
      if (!parentAsNewest) this.stamps[p] = this.stamps[s] as number;
      this.linkLeaf(p, parentAsNewest);
    }
  }

  private linkLeaf(s: number, asNewest: boolean): void {
    if (asNewest) {
      this.older[s] = this.newest;
      this.newer[s] = NONE;
      if (this.newest === NONE) this.oldest = s;
      else this.newer[this.newest] = s;
      this.newest = s;
    } else {
      this.newer[s] = this.oldest;
      this.older[s] = NONE;
      if (this.oldest === NONE) this.newest = s;
      else this.older[this.oldest] = s;
      this.oldest = s;
    }
  }

  private unlinkLeaf(s: number): void {
    const o = this.older[s] as number;
    const n = this.newer[s] as number;
    if (o === NONE) this.oldest = n;
    else this.newer[o] = n;
    if (n === NONE) this.newest = o;
    else this.older[n] = o;
  }

  /** Learns since one ended or branched at the slot; stamps wrap at 2^32. */
  private ageOf(s: number): number {
    return (this.stamp - (this.stamps[s] as number)) >>> 0;
  }

  private relinkNewest(s: number): void {
    if (s === this.newest) return;
    this.unlinkLeaf(s);
    this.linkLeaf(s, true);
  }

  /** Both 32-bit halves of the 53-bit hash, mixed (Fibonacci hashing) into the top bits. */
  private bucketOf(h: number): number {
    return Math.imul((h >>> 0) ^ ((h / 4294967296) >>> 0), 0x9e3779b1) >>> this.shift;
  }

  private allocate(slots: number): void {
    this.keys = new Float64Array(slots);
    this.parent = new Int32Array(slots);
    this.stamps = new Uint32Array(slots);
    this.older = new Int32Array(slots);
    this.newer = new Int32Array(slots);
    this.next = new Int32Array(slots);
    this.prev = new Int32Array(slots);
    this.sizeBuckets(slots);
    this.oldest = this.newest = this.free = this.matchedSlot = NONE;
    this.used = this.count = 0;
  }

  private sizeBuckets(slots: number): void {
    let bucketCount = 16;
    while (bucketCount < slots) bucketCount *= 2;
    this.buckets = new Int32Array(bucketCount).fill(NONE);
    this.shift = 32 - Math.log2(bucketCount);
  }

  /** Larger arrays, every slot where it was (a learn holds slot numbers across it); the buckets are hashed again. */
  private grow(slots: number): void {
    const live = this.liveSlots();
    const widen = <T extends Float64Array | Int32Array | Uint32Array>(a: T, make: new (n: number) => T): T => {
      const b = new make(slots);
      b.set(a);
      return b;
    };
    this.keys = widen(this.keys, Float64Array);
    this.parent = widen(this.parent, Int32Array);
    this.stamps = widen(this.stamps, Uint32Array);
    this.older = widen(this.older, Int32Array);
    this.newer = widen(this.newer, Int32Array);
    this.next = widen(this.next, Int32Array);
    this.prev = widen(this.prev, Int32Array);
    this.rehash(live);
  }

  /** Moves every entry into the first slots of arrays of `slots` slots (at least the count), links renumbered. */
  private compact(slots: number): void {
    const live = this.liveSlots();
    const { keys, parent, stamps, older, newer } = this;
    const moved = new Int32Array(this.used).fill(NONE);
    live.forEach((s, t) => (moved[s] = t));
    const renumber = (s: number) => (s < 0 ? s : (moved[s] as number));
    const oldest = renumber(this.oldest);
    const newest = renumber(this.newest);
    this.allocate(slots);
    live.forEach((s, t) => {
      this.keys[t] = keys[s] as number;
      this.parent[t] = renumber(parent[s] as number);
      this.stamps[t] = stamps[s] as number;
      const interior = newer[s] === INTERIOR;
      this.newer[t] = interior ? INTERIOR : renumber(newer[s] as number);
      this.older[t] = interior ? (older[s] as number) : renumber(older[s] as number);
    });
    this.used = this.count = live.length;
    this.oldest = oldest;
    this.newest = newest;
    this.rehash(live.map((_, t) => t));
  }

  private liveSlots(): number[] {
    const live: number[] = [];
    for (const first of this.buckets) for (let s = first; s !== NONE; s = this.next[s] as number) live.push(s);
    return live;
  }

  /** Buckets sized for the arrays, the live slots linked into them; the free list's links are left as they are. */
  private rehash(live: readonly number[]): void {
    this.sizeBuckets(this.keys.length);
    for (const s of live) {
      const b = this.bucketOf(this.keys[s] as number);
      const first = this.buckets[b] as number;
      this.next[s] = first;
      this.prev[s] = NONE;
      if (first !== NONE) this.prev[first] = s;
      this.buckets[b] = s;
    }
  }
}
