import type { GroupSettings } from "../../config/schema.ts";
import type { Backend } from "../backend.ts";
import { HotPrefixes } from "../hot-prefixes.ts";
import { SharedWorkingSet } from "../shared-working-set.ts";
import { usable, type Signal } from "../policy.ts";

/** Distinct match lengths tried first on each backend's set. */
const GUESSES = 5;

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
  /** The longest match. */
  best = 0;
  /**
   * The longest match on a backend that could take requests but for its hard cap (maxInFlight):
   * not a candidate, so neither in `matched` nor in `best`, yet a pick that holds less of the
   * prompt moved off it for its load. With the defaults (saturation = maxInFlight) that is the
   * only way a backend is at the valve.
   */
  bestAtCap = 0;
  /**
   * The longest match ends where a prefix is shared: on the first backend holding it another
   * chain went on past it (a branch point: a system prompt, a document), or at least
   * `hotThreshold` recent requests matched it (hot). A copy anywhere then serves everyone.
   */
  shared = false;
  /**
   * Per candidate: a shared match counts as cached there too. Only for a prefix that carries at
   * least one backend's share of the group's new prompts (its score × usable backends ≥ the new
   * prompts' count, both decaying alike): a system prompt every conversation opens with is copied
   * wherever load sends it, while each of many group prompts, a few questions apiece, stays where
   * it is cached. Copying those too (llm-d's b2b-saas: 150 group prompts) gave each of them a
   * share of every backend's cache: kv_hit 0.73–0.76 and TTFT p95 6.5–7.4 s over 3 seeds, without
   * it 0.76 and 3.8–5.8 s. And only while the copies fit that candidate's cache (REPLICATED_SHARE).
   */
  readonly replicable: boolean[] = [];
  private readonly guesses = new MatchGuesses();
  /** Shared by the versions; each call decays them with its own version's hotHalfLifeMs. */
  private readonly hot = new HotPrefixes(HOT_PREFIXES_TRACKED);
  private readonly sharedSet = new SharedWorkingSet(HOT_PREFIXES_TRACKED);

  produce(backends: readonly Backend[], chain: ArrayLike<number>, settings: GroupSettings, now: number): void {
    let best = 0;
    let bestAt = -1;
    const guesses = this.guesses;
    guesses.reset();
    let usableCount = 0;
    let bestAtCap = 0;
    for (let i = 0; i < backends.length; i++) {
      const b = backends[i] as Backend;
      let m = 0;
      if (b.available) {
        if (chain.length > 0) {
          m = b.prefixes.match(chain, guesses.values, guesses.count);
          guesses.saw(m);
        }
        if (usable(b)) usableCount++;
        else {
          if (m > bestAtCap) bestAtCap = m;
          m = 0;
        }
      }
      this.matched[i] = m;
      if (m > best) {
        best = m;
        bestAt = i;
      }
    }
    this.best = best;
    this.bestAtCap = bestAtCap;
    this.shared = false;
    const { hot } = this;
    const halfLifeMs = settings.hotHalfLifeMs;
    if (best === 0) {
      // A one-block prompt (at most blockChars characters, about one KV block's tokens) leaves
      // next to nothing in an engine's cache for anyone to share: counted, a gateway's warm-up or
      // a burst of "hi"s made the system prompt the next conversations open with look too rare to
      // copy, and they queued behind its first backend instead, there for all their turns.
      if (chain.length > 1) hot.newPrompt(now, halfLifeMs);
      return;
    }
    const last = chain[best - 1] as number;
    const branched = (backends[bestAt] as Backend).prefixes.isInterior(last);
    // Counted whether or not the prefix branched: its score is what makes it hot later, elsewhere.
    const score = hot.hit(last, now, halfLifeMs);
    this.shared = branched || (settings.hotThreshold > 0 && score >= settings.hotThreshold);
    if (!this.shared) return;
    const newPrompts = hot.newPrompt(now, halfLifeMs);
    this.sharedSet.matched(last, best, now, halfLifeMs * SHARED_WINDOW_HALF_LIVES);
    const worthCopying = score * usableCount >= newPrompts;
    const needed = this.sharedSet.blocks / REPLICATED_SHARE;
    for (let i = 0; i < backends.length; i++) this.replicable[i] = worthCopying && needed <= (backends[i] as Backend).prefixes.capacity;
  }
}

/**
 * The match lengths of one chain on the backends matched so far, the most common first: the next
 * backend's likely one (PrefixSet.match tries them before its binary search). Most backends of a
 * group match all of a shared prefix or none of the chain, so after the first few a match costs
 * two lookups, not ten. Starts with 0, the match of a backend that holds none of it.
 */
class MatchGuesses {
  readonly values = new Int32Array(GUESSES);
  private readonly counts = new Int32Array(GUESSES);
  count = 1;

  reset(): void {
    this.values[0] = 0;
    this.counts[0] = 0;
    this.count = 1;
  }

  /** A backend matched `m` blocks. */
  saw(m: number): void {
    const { values, counts } = this;
    let k = 0;
    while (k < this.count && values[k] !== m) k++;
    if (k === this.count) {
      if (k === GUESSES) return;
      values[k] = m;
      counts[k] = 0;
      this.count++;
    }
    counts[k] = (counts[k] as number) + 1;
    for (; k > 0 && (counts[k] as number) > (counts[k - 1] as number); k--) {
      const v = values[k] as number;
      const c = counts[k] as number;
      values[k] = values[k - 1] as number;
      counts[k] = counts[k - 1] as number;
      values[k - 1] = v;
      counts[k - 1] = c;
    }
  }
}
