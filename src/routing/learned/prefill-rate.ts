import { LearnedFigure } from "./bounded.ts";

/**
 * A backend's prefill rate, in prompt tokens per second, learned from each streamed request's time
 * to first token and the prompt tokens it had to prefill (prompt − cached, as the backend
 * reported).
 *
 * A request's TTFT is a fixed cost (the first decode step, the API server, the network), plus its
 * prefill, plus whatever it waited for: queued behind other prompts, batched with running
 * sequences. A per-request rate (tokens ÷ TTFT) folds both the fixed cost and the wait into the
 * rate: on a multi-turn workload, where most requests prefill a few hundred tokens, that reads a
 * backend 3–5× slower than it is (measured on the simulator), even at its upper envelope. What
 * the prefill-debt drain needs is the marginal rate — the slope of TTFT over prefilled tokens —
 * and the queue is what the debt itself stands for. So the rate is 1 / the slope of the lower
 * envelope of (tokens, TTFT) over the last WINDOW requests: a Theil–Sen slope (the median of the
 * pairwise slopes, which a few outliers cannot move) over each prompt size's least-waited point
 * (leastWaited), then again over those on or below that line's median residual — the less-queued
 * half, since waiting only ever adds. It is refitted every REFIT reports (a few hundred pairs:
 * microseconds, on sampled releases only).
 *
 * A fit is taken only when the window pins the slope down: Sen's confidence interval on the
 * first fit (the pairwise slopes at the ranks Kendall's tau gives for 95%; the envelope's points
 * are picked by that line, so its own interval tests nothing) must lie above 0 and within a
 * factor MAX_INTERVAL_RATIO. Where every request prefills about as much as the next — a
 * conversation's later turns, each a few dozen new tokens, ~4 ms of prefill against the ±17 ms a
 * request's place in the engine's decode steps moves its TTFT — the pairwise slopes are noise of
 * either sign, and the median of noise set the rate anywhere from 1/8× to 3× the engine's (the
 * simulator under bench:routing-feedback's pressured trace, in virtual time): the prefill debt
 * then drained up to 8× too slowly, backends looked busy, and sessions were moved off their
 * cache. The figure held stays. And a fit within DEAD_BAND of it leaves it: a rate that close
 * drains the debt well enough, and one that moved with every fit's noise moved placement with it.
 *
 * A TTFT over WAITED times its prefill at its own rate (learned, else configured; not one
 * borrowed) is taken for a wait and not fitted. The router's count of prompt work ahead
 * (FeedbackReport.aheadBlocks) misses the engine's own queue: in llm-d's b2b-saas shape an
 * overload drained through one backend with nothing ahead by that count, 1,210-token questions'
 * TTFTs falling from 2.5 s to 0.17 s, and the slope to two whole 7,210-token prompts in the
 * window read 3,685 tokens/s of the engine's 23,810 (virtual time, seed 2): the group's placement
 * moved off that backend. The bound leaves room for a rate 4× too fast and a fixed cost half as
 * long again beside it (at 4 the learner no longer came down from 4× too fast; at 8 b2b-saas
 * seed 1 still learned 16,533 and lost 0.03 of its kv_hit); a prefill of a few dozen tokens,
 * mostly fixed cost, is dropped too, and could not tell a rate anyway.
 *
 * Until a backend's own answers teach it a rate, it borrows its group's: the other backends'
 * learned rates as a multiple of their configured ones (the median), times its own configured
 * rate — so an operator's figure that is wrong for every server alike is put right on all of them
 * once some have learned, and a fleet's servers configured differently stay different. Without it,
 * a rate configured 4× too slow and learned by two backends of four left the other two looking 4×
 * busier than they were, and sessions moved off them (virtual time, bench:routing-feedback's
 * trace at 32 sessions: kv_hit 0.893 against 0.906).
 */

const WINDOW = 32;
const REFIT = 4;
/** Reports before the learned rate replaces the configured one. */
const MIN_SAMPLES = 12;
/** Pairs closer than this in prefilled tokens say little about a slope. */
const MIN_PAIR_SPAN = 32;
export const MIN_PREFILL_TOKENS = 16;
/** The furthest it moves from the configured rate, either way. */
export const RATE_RANGE = 16;
/** Sen's interval at 95% (the normal quantile). */
const Z = 1.96;
/** A fit whose interval spans more than this factor says too little to move the rate. */
const MAX_INTERVAL_RATIO = 2;
/** A fit within this factor of the figure held leaves it. */
const DEAD_BAND = 1.5;
/** A TTFT over this many times its prefill at its own rate was mostly a wait. */
const WAITED = 6;

export class PrefillRateLearner {
  private readonly figure: LearnedFigure;
  private readonly tokens = new Float64Array(WINDOW);
  private readonly ttft = new Float64Array(WINDOW);
  private filled = 0;
  private next = 0;
  /**
   * The group's factor (PrefillRateLearner.borrow), until it learns its own; never saved. A factor,
   * not a rate: a new configured rate scales it, as it does the group's learners.
   */
  private borrowed: number | null = null;
  samples = 0;

  constructor(configured: number) {
    this.figure = new LearnedFigure(configured, RATE_RANGE);
  }

  /** Its own learned rate, else the one it borrowed from its group, else the configured one. */
  get tokensPerSec(): number {
    return this.figure.learnedValue ?? this.figure.configuredValue * (this.borrowed ?? 1);
  }

  /** The group's learned rates over their configured ones (null: none learned), as a factor of its own configured rate while it has learned none; true when the rate changed. */
  borrow(factor: number | null): boolean {
    const before = this.tokensPerSec;
    this.borrowed = factor === null ? null : Math.min(RATE_RANGE, Math.max(1 / RATE_RANGE, factor));
    return this.tokensPerSec !== before;
  }

  get configuredRate(): number {
    return this.figure.configuredValue;
  }

  /** What it learned, or null while the configured rate holds. */
  get learnedRate(): number | null {
    return this.figure.learnedValue;
  }

  configure(configured: number): void {
    this.figure.configure(configured);
  }

  /** One request: the tokens it prefilled and its TTFT. True when the rate changed. */
  observe(uncachedTokens: number, ttftMs: number): boolean {
    if (!(uncachedTokens >= MIN_PREFILL_TOKENS) || !(ttftMs > 0)) return false;
    if (ttftMs > (WAITED * 1000 * uncachedTokens) / this.figure.value) return false;
    this.tokens[this.next] = uncachedTokens;
    this.ttft[this.next] = ttftMs;
    this.next = (this.next + 1) % WINDOW;
    if (this.filled < WINDOW) this.filled++;
    this.samples++;
    if (this.filled < MIN_SAMPLES || this.samples % REFIT !== 0) return false;
    const points = this.leastWaited();
    const first = this.fit(points);
    if (first === null) return false;
    if (!(first.low > 0 && first.high <= MAX_INTERVAL_RATIO * first.low)) return false;
    const residual = (i: number) => (this.ttft[i] as number) - first.slope * (this.tokens[i] as number);
    const cut = median(points.map(residual));
    const envelope = this.fit(points.filter((i) => residual(i) <= cut)) ?? first;
    const rate = 1000 / envelope.slope;
    const held = this.tokensPerSec;
    if (rate < held * DEAD_BAND && rate > held / DEAD_BAND) return false;
    return this.figure.set(rate);
  }

  /**
   * The window's points, of each size (prompts within MIN_PAIR_SPAN tokens of one another) only
   * the one that waited least: waiting only ever adds, so it is that size's best estimate, and the
   * fit's interval then counts the sizes that pin the slope, not the requests. A window of two
   * sizes — b2b-saas's questions and whole prompts — otherwise read its slope off the few whole
   * prompts, one of which waited twice its prefill, and took 14,838 tokens/s for the engine's
   * 23,810 (virtual time, seed 1).
   */
  private leastWaited(): number[] {
    const order = Array.from({ length: this.filled }, (_, i) => i).sort((a, b) => (this.tokens[a] as number) - (this.tokens[b] as number));
    const kept: number[] = [];
    let from = -Infinity;
    for (const i of order) {
      const t = this.tokens[i] as number;
      const last = kept[kept.length - 1];
      if (last === undefined || t - from >= MIN_PAIR_SPAN) {
        kept.push(i);
        from = t;
      } else if ((this.ttft[i] as number) < (this.ttft[last] as number)) {
        kept[kept.length - 1] = i;
      }
    }
    return kept;
  }

  restore(tokensPerSec: number): void {
    this.figure.restore(tokensPerSec);
  }

  /**
   * The Theil–Sen slope (ms per token) of the points `at` — the median of their pairwise slopes —
   * with Sen's (1968) interval: the slopes ranked (N ∓ C) / 2 of N, C = z·√(n(n−1)(2n+5)/18), its
   * ranks scaled to the pairs kept (those MIN_PAIR_SPAN apart). Null when too few pairs, or no
   * positive slope.
   */
  private fit(at: readonly number[]): { slope: number; low: number; high: number } | null {
    const slopes: number[] = [];
    for (let a = 0; a < at.length; a++) {
      for (let b = a + 1; b < at.length; b++) {
        const i = at[a] as number;
        const j = at[b] as number;
        const du = (this.tokens[j] as number) - (this.tokens[i] as number);
        if (Math.abs(du) >= MIN_PAIR_SPAN) slopes.push(((this.ttft[j] as number) - (this.ttft[i] as number)) / du);
      }
    }
    if (slopes.length < 3) return null;
    const slope = median(slopes);
    if (!(slope > 0)) return null;
    const n = at.length;
    const pairs = (n * (n - 1)) / 2;
    const c = Z * Math.sqrt((n * (n - 1) * (2 * n + 5)) / 18) * (slopes.length / pairs);
    const rank = (r: number) => slopes[Math.min(slopes.length - 1, Math.max(0, Math.round(r)))] as number;
    return { slope, low: rank((slopes.length - c) / 2 - 1), high: rank((slopes.length + c) / 2) };
  }
}

/**
 * What a group's learners lend (PrefillRateLearner.borrow): the median of their learned rates
 * over their configured ones, taken over the factors' logarithms, so the middle two's geometric
 * mean when even (a factor); null when none has learned.
 */
export function groupRateFactor(learners: readonly PrefillRateLearner[]): number | null {
  const logs: number[] = [];
  for (const l of learners) if (l.learnedRate !== null) logs.push(Math.log(l.learnedRate / l.configuredRate));
  return logs.length === 0 ? null : Math.exp(median(logs));
}

function median(xs: number[]): number {
  xs.sort((a, b) => a - b);
  const m = xs.length >> 1;
  return xs.length % 2 === 1 ? (xs[m] as number) : ((xs[m - 1] as number) + (xs[m] as number)) / 2;
}
