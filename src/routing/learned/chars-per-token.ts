/**
 * Characters per token, as the router counts characters: the prompt's hash blocks × blockChars
 * (each message's last, partial block counts whole) over the prompt tokens the backend reported.
 * That is the figure every conversion in the router needs — matched blocks to cached tokens, a
 * prefill rate in tokens to blocks, cached tokens to blocks — so a full match predicts the
 * prompt's own token count, chat template and block padding included. A tokenizer's plain ratio
 * (4 for the simulator, ~5.3 for llama.cpp's SPM vocabulary on English) would over-predict by the
 * padding, and the capacity learner would read that bias as evictions.
 *
 * A running mean in log space, the prior counted as PRIOR_WEIGHT samples, then an exponential one
 * (so it follows a tokenizer swapped under the same server): one sample moves it at most
 * 1/(PRIOR_WEIGHT + 1) of its clipped log-ratio. Each sample is clipped to within 2× of the
 * estimate, so one odd prompt (a base64 blob, a tool schema) cannot drag it far.
 */

/** What the router assumes before any report (one common tokenizer's figure on English text). */
export const CHARS_PER_TOKEN = 4;
export const CHARS_PER_TOKEN_MIN = 0.5;
export const CHARS_PER_TOKEN_MAX = 16;
const PRIOR_WEIGHT = 4;
/** Past this many samples the mean becomes exponential: a sample then weighs 1/32. */
const WINDOW = 32;
const CLIP = Math.LN2;
/** A change smaller than this is not worth passing on (a drain rate to recompute, a snapshot to save). */
const NOTABLE = 0.001;
/** Below this many tokens the template's own tokens dominate the ratio: no sample. */
export const MIN_SAMPLE_TOKENS = 32;

export class CharsPerTokenLearner {
  private log = Math.log(CHARS_PER_TOKEN);
  samples = 0;
  value = CHARS_PER_TOKEN;

  /** One prompt: `chars` as the router counted them, `tokens` as the backend did. True when the estimate moved by more than 0.1%. */
  observe(chars: number, tokens: number): boolean {
    if (!(tokens >= MIN_SAMPLE_TOKENS) || !(chars > 0)) return false;
    const d = Math.max(-CLIP, Math.min(CLIP, Math.log(chars / tokens) - this.log));
    this.samples++;
    this.log += d / Math.min(this.samples + PRIOR_WEIGHT, WINDOW);
    const before = this.value;
    this.value = Math.max(CHARS_PER_TOKEN_MIN, Math.min(CHARS_PER_TOKEN_MAX, Math.exp(this.log)));
    this.log = Math.log(this.value);
    return Math.abs(this.value / before - 1) > NOTABLE;
  }

  restore(value: number, samples: number): void {
    if (!(value >= CHARS_PER_TOKEN_MIN && value <= CHARS_PER_TOKEN_MAX) || !(samples >= 0)) return;
    this.value = value;
    this.log = Math.log(value);
    this.samples = samples;
  }
}
