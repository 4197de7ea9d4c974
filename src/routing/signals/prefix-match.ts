import type { GroupSettings } from "../../config/schema.ts";
import type { Backend } from "../backend.ts";
import { HotPrefixes } from "../hot-prefixes.ts";
import { SharedWorkingSet } from "../shared-working-set.ts";
import { usable, type Signal } from "../policy.ts";

/** Distinct hot-prefix candidates remembered per group. */
const HOT_PREFIXES_TRACKED = 8192;

/**
 * A shared prefix is copied to a backend that lacks it only while a copy of every shared prefix
 * in use would take at most this share of that backend's cache: the rest of it is for the
 * conversations' own histories. Past it, a shared prefix stays where it is cached, as any other.
 */
const REPLICATED_SHARE = 0.5;

/** How long after its last match a shared prefix counts in the working set, in hot-prefix half-lives. */
const SHARED_WINDOW_HALF_LIVES = 3;

/**
 * How much of the request's prompt each backend likely holds in its KV cache: the longest leading
 * run of the chain in the backend's prefix set (a binary search: the sets are prefix-closed), and
 * whether the longest of those matches ends in a prefix other prompts share. Producing it counts
 * the request as a hit on that prefix in the group's hot prefixes.
 */
export class PrefixMatch implements Signal {
  /** Per candidate, by position: leading blocks of the chain in its prefix set; 0 for one that cannot take the request. */
  readonly matched: number[] = [];
  /** Per candidate: of its matched blocks, those computed by now (src/routing/pending-prefills.ts); the rest it would prefill again. */
  readonly ready: number[] = [];
  /** The longest match. */
  best = 0;
  /**
   * The longest match ends where a prefix is shared: on the first backend holding it another
   * chain went on past it (a branch point: a system prompt, a document), or at least
   * `hotThreshold` recent requests matched it (hot). A copy anywhere then serves everyone.
   */
  shared = false;
  /** Per candidate: a shared match counts as cached there too — copying what is shared is affordable on its cache. */
  readonly replicable: boolean[] = [];
  private hot: HotPrefixes | null = null;
  private sharedSet: SharedWorkingSet | null = null;

  produce(backends: readonly Backend[], chain: ArrayLike<number>, settings: GroupSettings, now: number): void {
    let best = 0;
    let bestAt = -1;
    for (let i = 0; i < backends.length; i++) {
      const b = backends[i] as Backend;
      const m = !usable(b) || chain.length === 0 ? 0 : b.prefixes.match(chain);
      this.matched[i] = m;
      let ready = m === 0 ? 0 : b.pending.ready(chain, m, now);
      // A match that ends at the end of a chain, with more after it, is a conversation coming
      // back: its client has the previous turn's answer, so that prompt was computed, whatever
      // the estimate says and whether or not its release has arrived yet.
      if (ready < m && m < chain.length && !b.prefixes.isInterior(chain[m - 1] as number)) ready = m;
      this.ready[i] = ready;
      if (m > best) {
        best = m;
        bestAt = i;
      }
    }
    this.best = best;
    this.shared = false;
    if (best === 0) return;
    const last = chain[best - 1] as number;
    const branched = (backends[bestAt] as Backend).prefixes.isInterior(last);
    // Counted whether or not the prefix branched: its score is what makes it hot later, elsewhere.
    const popular = settings.hotThreshold > 0 && this.isHot(last, settings, now);
    this.shared = branched || popular;
    if (!this.shared) return;
    this.sharedSet ??= new SharedWorkingSet(settings.hotHalfLifeMs * SHARED_WINDOW_HALF_LIVES, HOT_PREFIXES_TRACKED);
    this.sharedSet.matched(last, best, now);
    const needed = this.sharedSet.blocks / REPLICATED_SHARE;
    for (let i = 0; i < backends.length; i++) this.replicable[i] = needed <= (backends[i] as Backend).prefixes.capacity;
  }

  /** Counts a request matching the prefix that ends at `hash`; whether that prefix is hot, this request included. */
  private isHot(hash: number, settings: GroupSettings, now: number): boolean {
    this.hot ??= new HotPrefixes(HOT_PREFIXES_TRACKED, settings.hotHalfLifeMs);
    return this.hot.hit(hash, now) >= settings.hotThreshold;
  }
}
