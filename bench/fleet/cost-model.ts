import type { GpuProfile } from "./presets.ts";

/**
 * How long one engine step takes. A step, as in vLLM's continuous batching, prefills a chunk of
 * the prompts it schedules (at most maxNumBatchedTokens in all; the scheduler picks the chunks)
 * and decodes one token for every sequence already running:
 *
 *   step = [prefillBaseMs + prefillMsPerToken × prompt tokens prefilled]   if it prefills any
 *        + [decodeStepMs × (1 + batchSlowdown × (running − 1))]           if any are decoding
 *   all × slowFactor
 *
 * The decode term grows linearly with the batch: each sequence adds its KV reads and its share
 * of the FLOPs to a step whose floor is one read of the weights. A prefill chunk in the same step
 * delays every decoding sequence, the prefill/decode interference real servers show; the token
 * budget bounds it, as chunked prefill does.
 */
export interface CostModel {
  /** No latency at all: a request can run synchronously. */
  readonly instant: boolean;
  stepMs(prefillTokens: number, prefilling: number, decoding: number, running: number): number;
}

/** A worker's cost model: a fault with an onset changes its slowFactor while the worker runs. */
export interface WorkerCost extends CostModel {
  slowFactor: number;
}

export function costModel(profile: GpuProfile, slowFactor: number): WorkerCost {
  const { prefillBaseMs, prefillMsPerToken, decodeStepMs, batchSlowdown } = profile;
  const zero = prefillBaseMs === 0 && prefillMsPerToken === 0 && decodeStepMs === 0;
  return {
    slowFactor,
    get instant() {
      return zero || this.slowFactor === 0;
    },
    stepMs(prefillTokens, prefilling, decoding, running) {
      if (this.instant) return 0;
      const prefill = prefilling > 0 ? prefillBaseMs + prefillMsPerToken * prefillTokens : 0;
      const decode = decoding > 0 ? decodeStepMs * (1 + batchSlowdown * Math.max(0, running - 1)) : 0;
      return (prefill + decode) * this.slowFactor;
    },
  };
}
