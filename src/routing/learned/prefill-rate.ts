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
 * pairwise slopes, which a few outliers cannot move) over all points, then again over those on or
 * below that line's median residual — the less-queued half, since waiting only ever adds. It is
 * refitted every REFIT reports (a few hundred pairs: microseconds, on sampled releases only).
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

export class PrefillRateLearner {
  private readonly figure: LearnedFigure;
  private readonly tokens = new Float64Array(WINDOW);
  private readonly ttft = new Float64Array(WINDOW);
  private filled = 0;
  private next = 0;
  samples = 0;

  constructor(configured: number) {
    this.figure = new LearnedFigure(configured, RATE_RANGE);
  }

  get tokensPerSec(): number {
    return this.figure.value;
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
    this.tokens[this.next] = uncachedTokens;
    this.ttft[this.next] = ttftMs;
    this.next = (this.next + 1) % WINDOW;
    if (this.filled < WINDOW) this.filled++;
    this.samples++;
    if (this.filled < MIN_SAMPLES || this.samples % REFIT !== 0) return false;
    const all = Array.from({ length: this.filled }, (_, i) => i);
    const first = this.slope(all);
    if (first === null) return false;
    const residual = (i: number) => (this.ttft[i] as number) - first * (this.tokens[i] as number);
    const cut = median(all.map(residual));
    const msPerToken = this.slope(all.filter((i) => residual(i) <= cut)) ?? first;
    return this.figure.set(1000 / msPerToken);
  }

  restore(tokensPerSec: number): void {
    this.figure.restore(tokensPerSec);
  }

  /** The median of the pairwise slopes (ms per token) of the points `at`; null when too few pairs, or no positive slope. */
  private slope(at: readonly number[]): number | null {
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
    const s = median(slopes);
    return s > 0 ? s : null;
  }
}

function median(xs: number[]): number {
  xs.sort((a, b) => a - b);
  const m = xs.length >> 1;
  return xs.length % 2 === 1 ? (xs[m] as number) : ((xs[m - 1] as number) + (xs[m] as number)) / 2;
}
