/** Prefills remembered per backend: more than a burst puts on one backend before the first is done. */
const KEPT = 16;

/**
 * The prompt blocks a backend was sent but has not finished prefilling, by the router's own
 * estimate of when its queue of prompt work reaches them. A prefix set learns a chain when the
 * request is routed, so a burst of one prompt finds it at once. Placement counts such a match as
 * cached (a request queued behind the prefill on that backend finds the blocks computed when its
 * turn comes; the simulator admits in order, SGLang holds back a request that shares a prefix with
 * one in the batch, vLLM caches a block once it is scheduled), but an engine may compute it again
 * for a request prefilled in the same batch and report no hit: such a decision is no evidence of
 * what the backend's cache holds (src/routing/feedback.ts). Placement counted it as uncached until
 * the share rule for copies (src/routing/signals/prefix-match.ts): with it, a group prompt's next
 * questions were placed by queued work alone and copied it (llm-d's b2b-saas, seed 1: kv_hit
 * 0.744 and TTFT p95 6.6 s; counted, 0.758 and 3.8 s).
 *
 * Each entry is a chain's first block that was new there (its depth and hash) and when it is
 * expected ready; a ring, since an entry older than a burst is long ready anyway.
 */
export class PendingPrefills {
  private readonly depth = new Int32Array(KEPT);
  private readonly hash = new Float64Array(KEPT);
  private readonly readyAt = new Float64Array(KEPT);
  /** Each entry's number: entries are numbered as added, and entry n sits at n % KEPT. */
  private readonly entry = new Float64Array(KEPT).fill(-1);
  private added = 0;
  /** The latest readyAt of any entry: past it, nothing is pending and a lookup costs one compare. */
  private until = 0;

  /** The chain's blocks from `depth` on were sent to be prefilled; done at `readyAt`. Returns the entry's number, for `done`. */
  add(depth: number, hash: number, readyAt: number): number {
    const n = this.added++;
    const i = n % KEPT;
    this.depth[i] = depth;
    this.hash[i] = hash;
    this.readyAt[i] = readyAt;
    this.entry[i] = n;
    if (readyAt > this.until) this.until = readyAt;
    return n;
  }

  /**
   * The request that sent entry `i` has ended, so its prompt was computed whatever the estimate
   * said: a conversation's next turn must find its history ready. A no-op once the ring has given
   * the entry's place to a later one.
   */
  done(n: number): void {
    const i = n % KEPT;
    if (this.entry[i] === n) this.readyAt[i] = 0;
  }

  /** Of the chain's `matched` leading blocks the backend holds, how many are computed by `now`: up to the first one still pending. */
  ready(chain: ArrayLike<number>, matched: number, now: number): number {
    if (now >= this.until || matched === 0) return matched;
    let ready = matched;
    for (let i = 0; i < KEPT; i++) {
      const d = this.depth[i] as number;
      if (d < ready && (this.readyAt[i] as number) > now && chain[d] === this.hash[i]) ready = d;
    }
    return ready;
  }
}
