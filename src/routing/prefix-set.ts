/**
 * The block hashes recently sent to one backend: an approximation of what its KV cache holds.
 * Bounded LRU.
 *
 * Prefix-closed: a chain is learned deepest block first, so its root ends up most recent and
 * eviction takes deep blocks before the blocks they extend. Hence if h[i] is present so is every
 * h[j < i], and the longest leading match can be found by binary search.
 *
 * Kept in typed arrays (a hash table and a doubly linked recency list over slots), not a Map: an
 * entry costs 28–32 bytes in any V8, where a Map of 53-bit keys costs ~45 in workerd and ~71 in
 * Node, each key a heap number the garbage collector walks. Arrays grow by doubling up to the
 * capacity and shrink with it.
 */

/** What one `learn` added: the blocks of its chain that were new, to be taken back if the request fails. */
export interface Lesson {
  /** The chain's blocks past what the set already held, shallowest first. */
  blocks: Float64Array;
  stamp: number;
  /** The block before them (null when the chain was all new), and whether a chain went on past it before. */
  parent: number | null;
  parentWasInterior: boolean;
}

const NONE = -1;
const MIN_SLOTS = 1024;
const STAMP_LIMIT = 0x7fffffff;

export class PrefixSet {
  private keys!: Float64Array;
  /** stamp << 1 | interior: which learn last went through the block, and whether some chain goes on past it. */
  private meta!: Uint32Array;
  private older!: Int32Array;
  private newer!: Int32Array;
  /** The next slot in the same bucket, or in the free list. */
  private next!: Int32Array;
  private buckets!: Int32Array;
  private shift = 0;
  private oldest = NONE;
  private newest = NONE;
  private free = NONE;
  /** Slots below this were handed out at least once. */
  private used = 0;
  private count = 0;
  private stamp = 0;
  private cap: number;

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

  /** Bytes its arrays hold: what the set costs, whatever the engine. */
  get bytes(): number {
    return this.keys.byteLength + this.meta.byteLength + this.older.byteLength + this.newer.byteLength + this.next.byteLength + this.buckets.byteLength;
  }

  /** Number of leading blocks of `chain` present in the set. */
  match(chain: ArrayLike<number>): number {
    let lo = 0;
    let hi = chain.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.find(chain[mid - 1] as number) !== NONE) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /**
   * Whether some learned chain continues past this block. A match that ends at an interior block
   * ends where another prompt went on differently: the matched part is shared (a system prompt,
   * a document). A match that ends at a chain's last block is a conversation coming back.
   */
  isInterior(hash: number): boolean {
    const s = this.find(hash);
    return s !== NONE && ((this.meta[s] as number) & 1) === 1;
  }

  /** Learns the chain (its first `capacity` blocks); returns what was new, or null when nothing was. */
  learn(chain: ArrayLike<number>): Lesson | null {
    const n = Math.min(chain.length, this.cap);
    const m = this.match(chain);
    const parent = m > 0 ? (chain[m - 1] as number) : null;
    const lesson: Lesson | null = m < n ? { blocks: Float64Array.from({ length: n - m }, (_, i) => chain[m + i] as number), stamp: 0, parent, parentWasInterior: parent !== null && this.isInterior(parent) } : null;
    this.stamp = (this.stamp % STAMP_LIMIT) + 1;
    for (let i = n - 1; i >= 0; i--) {
      const h = chain[i] as number;
      let s = this.find(h);
      let interior = i < n - 1;
      if (s === NONE) {
        s = this.insert(h);
      } else {
        interior ||= ((this.meta[s] as number) & 1) === 1;
        this.unlinkRecency(s);
        this.linkNewest(s);
      }
      this.meta[s] = ((this.stamp << 1) | (interior ? 1 : 0)) >>> 0;
    }
    if (lesson) lesson.stamp = this.stamp;
    return lesson;
  }

  /**
   * Takes a lesson back: removes its blocks that no later learn went through. A later chain
   * through one of them went through every block before it, so what is removed is the deep end
   * of the lesson and the set stays prefix-closed; blocks a later request also used stay. The
   * block before the lesson gets back its interior mark when nothing went through it since.
   */
  unlearn(lesson: Lesson): void {
    for (const h of lesson.blocks) {
      const s = this.find(h);
      if (s !== NONE && (this.meta[s] as number) >>> 1 === lesson.stamp) this.remove(s);
    }
    if (lesson.parent === null || lesson.parentWasInterior) return;
    const p = this.find(lesson.parent);
    if (p !== NONE && (this.meta[p] as number) >>> 1 === lesson.stamp) this.meta[p] = (lesson.stamp << 1) >>> 0;
  }

  /** Changes the capacity; a smaller one evicts the oldest entries and frees their memory. */
  resize(capacity: number): void {
    this.cap = capacity;
    while (this.count > capacity) this.remove(this.oldest);
    if (this.keys.length > capacity) this.rebuild(Math.max(capacity, 1));
  }

  /** Oldest to newest, for persistence and tests. */
  values(): number[] {
    const out: number[] = [];
    for (let s = this.oldest; s !== NONE; s = this.newer[s] as number) out.push(this.keys[s] as number);
    return out;
  }

  /**
   * The `max` most recent entries, oldest first, an interior block stored as −(hash + 1). The
   * newest entries of a prefix-closed set are what eviction would leave: prefix-closed too.
   */
  exportRecent(max: number): Float64Array {
    const n = Math.min(max, this.count);
    const out = new Float64Array(n);
    let s = this.newest;
    for (let i = n - 1; i >= 0; i--) {
      const h = this.keys[s] as number;
      out[i] = ((this.meta[s] as number) & 1) === 1 ? -(h + 1) : h;
      s = this.older[s] as number;
    }
    return out;
  }

  /** Loads what exportRecent wrote, oldest first, so recency order is kept. */
  importRecent(saved: Float64Array): void {
    for (const x of saved) {
      const interior = x < 0;
      const h = interior ? -x - 1 : x;
      let s = this.find(h);
      if (s === NONE) {
        s = this.insert(h);
      } else {
        this.unlinkRecency(s);
        this.linkNewest(s);
      }
      this.meta[s] = interior ? 1 : 0;
    }
  }

  clear(): void {
    this.allocate(Math.min(this.cap, MIN_SLOTS));
  }

  private find(h: number): number {
    for (let s = this.buckets[this.bucketOf(h)] as number; s !== NONE; s = this.next[s] as number) {
      if (this.keys[s] === h) return s;
    }
    return NONE;
  }

  /** Adds an absent hash as the newest entry, evicting the oldest when full. */
  private insert(h: number): number {
    if (this.count >= this.cap) this.remove(this.oldest);
    let s: number;
    if (this.free !== NONE) {
      s = this.free;
      this.free = this.next[s] as number;
    } else {
      if (this.used === this.keys.length) this.rebuild(Math.min(this.cap, this.keys.length * 2));
      s = this.used++;
    }
    this.keys[s] = h;
    const b = this.bucketOf(h);
    this.next[s] = this.buckets[b] as number;
    this.buckets[b] = s;
    this.linkNewest(s);
    this.count++;
    return s;
  }

  private remove(s: number): void {
    this.unlinkRecency(s);
    const b = this.bucketOf(this.keys[s] as number);
    let at = this.buckets[b] as number;
    if (at === s) {
      this.buckets[b] = this.next[s] as number;
    } else {
      while ((this.next[at] as number) !== s) at = this.next[at] as number;
      this.next[at] = this.next[s] as number;
    }
    this.next[s] = this.free;
    this.free = s;
    this.count--;
  }

  private linkNewest(s: number): void {
    this.older[s] = this.newest;
    this.newer[s] = NONE;
    if (this.newest === NONE) this.oldest = s;
    else this.newer[this.newest] = s;
    this.newest = s;
  }

  private unlinkRecency(s: number): void {
    const o = this.older[s] as number;
    const n = this.newer[s] as number;
    if (o === NONE) this.oldest = n;
    else this.newer[o] = n;
    if (n === NONE) this.newest = o;
    else this.older[n] = o;
  }

  /** Both 32-bit halves of the 53-bit hash, mixed (Fibonacci hashing) into the top bits. */
  private bucketOf(h: number): number {
    return Math.imul((h >>> 0) ^ ((h / 4294967296) >>> 0), 0x9e3779b1) >>> this.shift;
  }

  private allocate(slots: number): void {
    this.keys = new Float64Array(slots);
    this.meta = new Uint32Array(slots);
    this.older = new Int32Array(slots);
    this.newer = new Int32Array(slots);
    this.next = new Int32Array(slots);
    let bucketCount = 16;
    while (bucketCount < slots) bucketCount *= 2;
    this.buckets = new Int32Array(bucketCount).fill(NONE);
    this.shift = 32 - Math.log2(bucketCount);
    this.oldest = this.newest = this.free = NONE;
    this.used = this.count = 0;
  }

  /** Moves every entry, oldest first, into arrays of `slots` slots. */
  private rebuild(slots: number): void {
    const { keys, meta, newer } = this;
    const first = this.oldest;
    this.allocate(slots);
    for (let s = first; s !== NONE; s = newer[s] as number) {
      const t = this.insert(keys[s] as number);
      this.meta[t] = meta[s] as number;
    }
  }
}
