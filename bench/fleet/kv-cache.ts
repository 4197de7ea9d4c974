/**
 * A worker's prefix cache: the set of KV blocks (by chain hash) it still holds, least recently
 * used first. Insertion order of the Set is the LRU order, so touching is delete + add.
 */
export class PrefixCache {
  readonly capacity: number;
  private readonly blocks = new Set<number>();
  private evicted = 0;

  constructor(capacityBlocks: number) {
    this.capacity = capacityBlocks;
  }

  get size(): number {
    return this.blocks.size;
  }

  get evictions(): number {
    return this.evicted;
  }

  /** Number of leading blocks of `chain` held, at most `limit`. */
  match(chain: readonly number[], limit: number): number {
    const end = Math.min(limit, chain.length);
    let i = 0;
    while (i < end && this.blocks.has(chain[i] ?? -1)) i++;
    return i;
  }

  /**
   * Inserts or touches the blocks of a finished prefill or sequence. Deepest block first and root
   * last, so among them the root is the most recently used: eviction then trims a prefix from
   * its tail (as vLLM's free-block queue does) and a held block always has its whole prefix held.
   */
  insert(chain: readonly number[]): void {
    // Blocks past the capacity would be evicted by this same call; skip them.
    for (let i = Math.min(chain.length, this.capacity) - 1; i >= 0; i--) {
      const hash = chain[i] ?? -1;
      this.blocks.delete(hash);
      this.blocks.add(hash);
    }
    while (this.blocks.size > this.capacity) {
      const oldest = this.blocks.values().next();
      if (oldest.done) break;
      this.blocks.delete(oldest.value);
      this.evicted++;
    }
  }
}
