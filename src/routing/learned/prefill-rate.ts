/**
 * A backend's prefill rate, in prompt tokens per second, learned from each request's time to
 * first token and the prompt tokens it had to prefill (prompt − cached, as the backend reported).
 *
 * A request's TTFT is its prefill plus whatever it waited for: queued behind other prompts,
 * batched with running sequences, the network. Every wait makes the request's own rate lower than
 * the backend's, never higher, so the unqueued rate is the upper envelope of the per-request
 * rates — what the router's prefill-debt drain needs, since the debt itself stands for the queue.
 * A mean, or a fit through every point, would fold the queueing into the rate and count it twice.
 * The envelope is taken as a high quantile (the third highest of the last 32), not the maximum,
 * so one fast outlier (a cache hit the backend did not report, a clock step) cannot set it, and
 * over a window, so it follows a backend that gets slower or faster. Small prefills are left out:
 * there the fixed cost of a request (the first decode step, the network) is most of the time.
 */

import { LearnedFigure } from "./bounded.ts";

const WINDOW = 32;
/** Of the window's rates, the rank (from the top) taken as the envelope: about its 90th percentile. */
const RANK = 3;
/** Samples before the learned rate replaces the configured one. */
const MIN_SAMPLES = 8;
export const MIN_PREFILL_TOKENS = 64;
/** The furthest it moves from the configured rate, either way. */
export const RATE_RANGE = 16;

export class PrefillRateLearner {
  private readonly figure: LearnedFigure;
  private readonly rates = new Float64Array(WINDOW);
  private filled = 0;
  private next = 0;
  samples = 0;

  constructor(configured: number) {
    this.figure = new LearnedFigure(configured, RATE_RANGE);
  }

  get tokensPerSec(): number {
    return this.figure.value;
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
    this.rates[this.next] = (uncachedTokens * 1000) / ttftMs;
    this.next = (this.next + 1) % WINDOW;
    if (this.filled < WINDOW) this.filled++;
    this.samples++;
    if (this.filled < MIN_SAMPLES) return false;
    const sorted = this.rates.slice(0, this.filled).sort();
    return this.figure.set(sorted[this.filled - Math.min(RANK, this.filled)] as number);
  }

  restore(tokensPerSec: number): void {
    this.figure.restore(tokensPerSec);
  }
}
