import { BYTES_PER_TOKEN, textBlocks } from "../../fleet/prompt-blocks.ts";
import { renderChat } from "../../fleet/prompt-render.ts";
import { BLOCK_TOKENS } from "../../fleet/presets.ts";
import { stagedPoissonArrivals, type RateStage } from "../arrivals.ts";
import { rateForLoad, traceDemand, type FleetShape } from "../fleet-load.ts";
import { shuffled, streamFor } from "../prng.ts";
import { systemPrompt } from "../prompts.ts";
import type { TimedRequest, TimedTrace } from "../timed.ts";
import type { ChatMessage } from "../types.ts";
import { question } from "../words.ts";

/**
 * llm-d's shared-prefix benchmark (the "b2b-saas" shape: many tenants, each with a long system
 * prompt of its own, a few users asking long questions under it), as its optimized-baseline guide
 * runs it with inference-perf (llm-d/llm-d guides/optimized-baseline/benchmark-templates/
 * shared_prefix.yaml; the generator is kubernetes-sigs/inference-perf's SharedPrefixDataGenerator):
 *
 * - 150 groups × 5 prompts; a prompt is its group's 6,000-token system prompt and its own
 *   1,200-token question; every answer 1,000 tokens (ignore_eos).
 * - The 750 prompts are shuffled once; request k sends prompt k mod 750, so every prompt comes
 *   back again and again, whole.
 * - Poisson arrivals through 17 stages of constant rate: a warm-up of 15/s for 50 s (each prompt
 *   about once), then 3/s up to 60/s, each stage about 750 or 1,500 requests long. On llm-d's
 *   fleet (8 vLLM servers of Qwen3-32B on 2 H100s each) the last stages are far past saturation:
 *   their router's throughput was 14.4 requests/s at the 60/s stage.
 *
 * Here a prompt is chat messages (the system prompt, then the question as the user's message)
 * and tokens are the simulator's (4 bytes each). Scaled to another fleet by `rateScale`: every
 * stage's rate × rateScale and its duration ÷ rateScale, so the same requests arrive in the same
 * order, faster or slower, and the ramp crosses the fleet's saturation where llm-d's crossed
 * theirs when rateScale = that fleet's capacity / 14.4 (b2bSaasRateScale).
 */

export interface B2bSaasOptions {
  seed: number;
  groups: number;
  promptsPerGroup: number;
  systemPromptTokens: number;
  questionTokens: number;
  outputTokens: number;
  /** Every stage's rate × this, its duration ÷ this. */
  rateScale: number;
  /** Only the first this many stages (the warm-up is the first). */
  stages: number;
}

/** llm-d's stages (shared_prefix.yaml): rate in requests/s, duration in s. */
export const LLMD_STAGES: readonly RateStage[] = [
  [15, 50],
  [3, 20],
  [10, 20],
  [15, 20],
  [20, 38],
  [22, 34],
  [25, 30],
  [30, 25],
  [35, 21],
  [40, 38],
  [43, 36],
  [46, 33],
  [49, 30],
  [52, 29],
  [55, 27],
  [57, 26],
  [60, 25],
].map(([ratePerSec = 0, durationS = 0]) => ({ ratePerSec, durationS }));

/** Requests/s llm-d's router served at the 60/s stage (its guide's report): that fleet saturated. */
export const LLMD_SATURATED_RPS = 14.41;

export const B2B_SAAS_DEFAULTS: Readonly<B2bSaasOptions> = {
  seed: 1,
  groups: 150,
  promptsPerGroup: 5,
  systemPromptTokens: 6000,
  questionTokens: 1200,
  outputTokens: 1000,
  rateScale: 1,
  stages: LLMD_STAGES.length,
};

export function b2bSaasTrace(options: Partial<B2bSaasOptions> = {}): TimedTrace {
  const o = resolve(options);
  const prompts = renderPrompts(o);
  const order = shuffled(streamFor(o.seed, "b2b-order"), prompts.length);
  const stages = LLMD_STAGES.slice(0, o.stages).map((s) => ({ ratePerSec: s.ratePerSec * o.rateScale, durationS: s.durationS / o.rateScale }));
  const requests: TimedRequest[] = stagedPoissonArrivals(stages, o.seed).map((atMs, k) => {
    const prompt = prompts[order[k % order.length] ?? 0];
    if (!prompt) throw new Error("no prompt");
    return {
      id: `b2b-saas-${k}-${prompt.name}`,
      atMs,
      after: null,
      maxTokens: o.outputTokens,
      promptTokens: prompt.tokens,
      blocks: prompt.chain,
      messages: () => prompt.messages.map((m) => ({ ...m })),
    };
  });
  return { kind: "b2b-saas", params: { ...o, requests: requests.length }, blockTokens: BLOCK_TOKENS, requests };
}

/**
 * The rateScale that fits the shape to `fleet`: its capacity for these requests (fleet-load.ts,
 * with the ideal cache's hits: a group's prompt prefilled once, a repeated prompt not at all)
 * over the 14.4 requests/s llm-d's fleet served, so the ramp saturates both at the same stage.
 */
export function b2bSaasRateScale(fleet: FleetShape, options: Partial<B2bSaasOptions> = {}): number {
  const trace = b2bSaasTrace({ ...options, rateScale: 1 });
  return rateForLoad(traceDemand(trace), fleet, 1) / LLMD_SATURATED_RPS;
}

function resolve(options: Partial<B2bSaasOptions>): B2bSaasOptions {
  const o: B2bSaasOptions = { ...B2B_SAAS_DEFAULTS };
  for (const [key, value] of Object.entries(options)) {
    if (!(key in B2B_SAAS_DEFAULTS)) throw new RangeError(`unknown b2b-saas option ${key}`);
    if (value !== undefined) Object.assign(o, { [key]: value });
  }
  const bad = Object.entries(o).filter(([key, v]) => !(typeof v === "number" && Number.isFinite(v) && (key === "seed" ? v >= 0 : v > 0)));
  if (bad.length > 0) throw new RangeError(`b2b-saas options must be positive numbers: ${bad.map(([k]) => k).join(", ")}`);
  if (o.stages > LLMD_STAGES.length || !Number.isInteger(o.stages)) throw new RangeError(`stages must be an integer from 1 to ${LLMD_STAGES.length}`);
  return o;
}

interface Prompt {
  name: string;
  messages: ChatMessage[];
  tokens: number;
  chain: number[];
}

/** The last prompt set rendered: scaling a trace to a fleet builds it again with the same prompts. */
let lastPrompts: { key: string; prompts: Prompt[] } | undefined;

/** Every prompt, rendered and cut into simulator blocks once: requests repeat them. */
function renderPrompts(o: B2bSaasOptions): Prompt[] {
  const key = JSON.stringify([o.seed, o.groups, o.promptsPerGroup, o.systemPromptTokens, o.questionTokens]);
  if (lastPrompts?.key === key) return lastPrompts.prompts;
  const prompts: Prompt[] = [];
  for (let g = 0; g < o.groups; g++) {
    const system = systemPrompt(streamFor(o.seed, "b2b-group", g), o.systemPromptTokens * BYTES_PER_TOKEN);
    for (let q = 0; q < o.promptsPerGroup; q++) {
      const rng = streamFor(o.seed, "b2b-question", g * o.promptsPerGroup + q);
      const messages: ChatMessage[] = [
        { role: "system", content: system },
        { role: "user", content: question(rng, o.questionTokens * BYTES_PER_TOKEN) },
      ];
      const rendered = renderChat({ messages });
      if (!("text" in rendered)) throw new Error("a b2b-saas prompt does not render");
      const { tokens, chain } = textBlocks(rendered.text);
      prompts.push({ name: `g${g}-q${q}`, messages, tokens, chain });
    }
  }
  lastPrompts = { key, prompts };
  return prompts;
}
