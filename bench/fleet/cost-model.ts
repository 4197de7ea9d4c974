import type { GpuProfile } from "./presets.ts";

/**
 * How long one engine step takes. A step, as in vLLM's continuous batching, prefills the
 * sequences admitted in it and decodes one token for every sequence already running:
 *
 *   step = [prefillBaseMs + prefillMsPerToken × uncached prompt tokens]   if it admits any
 *        + [decodeStepMs × (1 + batchSlowdown × (running − 1))]          if any are decoding
 *   all × slowFactor
 *
 * The decode term grows linearly with the batch: each sequence adds its KV reads and its share
 * of the FLOPs to a step whose floor is one read of the weights. Prefill in the same step delays
 * every decoding sequence, the prefill/decode interference real servers show (without chunked
 * prefill, which this first cut does not model).
 */
export interface CostModel {
  readonly instant: boolean;
  stepMs(admittedUncachedTokens: number, admitted: number, decoding: number, running: number): number;
}

export function costModel(profile: GpuProfile, slowFactor: number): CostModel {
  const { prefillBaseMs, prefillMsPerToken, decodeStepMs, batchSlowdown } = profile;
  const instant = slowFactor === 0 || (prefillBaseMs === 0 && prefillMsPerToken === 0 && decodeStepMs === 0);
  return {
    instant,
    stepMs(uncachedTokens, admitted, decoding, running) {
      if (instant) return 0;
      const prefill = admitted > 0 ? prefillBaseMs + prefillMsPerToken * uncachedTokens : 0;
      const decode = decoding > 0 ? decodeStepMs * (1 + batchSlowdown * Math.max(0, running - 1)) : 0;
      return (prefill + decode) * slowFactor;
    },
  };
}
