/**
 * The blocks of the shared prefixes (branch points, hot prefixes) requests matched lately, each
 * counted once: what copying every one of them onto every backend would take of its cache. One
 * system prompt is a few hundred blocks and costs nothing to copy everywhere; llm-d's b2b-saas
 * shape, 150 group prompts of 6,000 tokens, is twice one backend's cache, and copying each of them
 * wherever load sends it leaves every backend thrashing through all of them.
 *
 * A prefix counts until `windowMs` (each call's, from its caller's config version) after its last
 * match. Kept in order of last match, so the ones that expire are always at the front, whatever
 * the window: a shorter one forgets at once what it no longer counts, a longer one counts what is
 * still there.
 */
export class SharedWorkingSet {
  private readonly last = new Map<number, { blocks: number; at: number }>();
  /** Prefixes remembered at most; past it the least recently matched goes first. */
  private readonly capacity: number;
  /** Σ blocks of the prefixes matched within the window. */
  blocks = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  /** A request matched the shared prefix of `blocks` blocks that ends at `hash`. */
  matched(hash: number, blocks: number, now: number, windowMs: number): void {
    this.expire(now, windowMs);
    const seen = this.last.get(hash);
    if (seen) {
      this.last.delete(hash);
      this.blocks -= seen.blocks;
    } else if (this.last.size >= this.capacity) {
      for (const [oldest, p] of this.last) {
        this.last.delete(oldest);
        this.blocks -= p.blocks;
        break;
      }
    }
    this.last.set(hash, { blocks, at: now });
    this.blocks += blocks;
  }

  /** Forgets the prefixes not matched within the window. */
  expire(now: number, windowMs: number): void {
    for (const [hash, p] of this.last) {
      if (p.at > now - windowMs) return;
      this.last.delete(hash);
      this.blocks -= p.blocks;
    }
  }
}
