/**
 * The block hashes recently sent to one backend: an approximation of what its KV cache holds.
 * Bounded LRU (a Set keeps insertion order; re-inserting a hash makes it the most recent).
 *
 * Prefix-closed: a chain is learned deepest block first, so its root ends up most recent and
 * eviction takes deep blocks before the blocks they extend. Hence if h[i] is present so is every
 * h[j < i], and the longest leading match can be found by binary search.
 */
export class PrefixSet {
  // hash → interior: some learned chain continues past this block. Map order is recency.
  private readonly set = new Map<number, boolean>();
  readonly capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get size(): number {
    return this.set.size;
  }

  /** Number of leading blocks of `chain` present in the set. */
  match(chain: ArrayLike<number>): number {
    let lo = 0;
    let hi = chain.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.set.has(chain[mid - 1] as number)) lo = mid;
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
    return this.set.get(hash) === true;
  }

  learn(chain: ArrayLike<number>): void {
    const set = this.set;
    const n = Math.min(chain.length, this.capacity);
    for (let i = n - 1; i >= 0; i--) {
      const h = chain[i] as number;
      const interior = i < n - 1 || set.get(h) === true;
      set.delete(h);
      set.set(h, interior);
    }
    let excess = set.size - this.capacity;
    if (excess > 0) {
      for (const h of set.keys()) {
        set.delete(h);
        if (--excess === 0) break;
      }
    }
  }

  /** Oldest to newest, for persistence. */
  values(): number[] {
    return [...this.set.keys()];
  }

  /**
   * The `max` most recent entries, oldest first, an interior block stored as −(hash + 1). The
   * newest entries of a prefix-closed set are what eviction would leave: prefix-closed too.
   */
  exportRecent(max: number): Float64Array {
    const n = Math.min(max, this.set.size);
    const out = new Float64Array(n);
    let skip = this.set.size - n;
    let i = 0;
    for (const [h, interior] of this.set) {
      if (skip > 0) {
        skip--;
        continue;
      }
      out[i++] = interior ? -(h + 1) : h;
    }
    return out;
  }

  /** Loads what exportRecent wrote, oldest first, so recency order is kept. */
  importRecent(saved: Float64Array): void {
    for (const x of saved) {
      const interior = x < 0;
      const h = interior ? -x - 1 : x;
      this.set.delete(h);
      this.set.set(h, interior);
    }
    let excess = this.set.size - this.capacity;
    for (const h of this.set.keys()) {
      if (excess-- <= 0) break;
      this.set.delete(h);
    }
  }

  clear(): void {
    this.set.clear();
  }
}
