/**
 * GPU profiles: what one simulated worker can hold (KV blocks, sequences, context) and how long
 * its work takes. The two GPU presets are derived below from public figures so that a benchmark
 * against the simulator has the proportions of a real fleet: prefill-heavy requests are expensive,
 * cached prefixes are nearly free, and a busy worker slows down every sequence it carries.
 * bench/fleet/README.md repeats this arithmetic with its sources.
 */

export interface GpuProfile {
  /** KV-cache capacity in blocks of BLOCK_TOKENS tokens (vLLM's "# GPU blocks"). */
  kvCapacityBlocks: number;
  /** Sequences decoded together; more wait in a FIFO queue (vLLM --max-num-seqs). */
  maxNumSeqs: number;
  /** Tokens one engine step computes, decode tokens first, prefill chunked into the rest (vLLM --max-num-batched-tokens). */
  maxNumBatchedTokens: number;
  /** Longest prompt + output accepted, in tokens (vLLM --max-model-len). */
  maxModelLen: number;
  /** Fixed cost of a step that prefills: one pass over the weights plus server overhead. */
  prefillBaseMs: number;
  /** Prefill cost per uncached prompt token. */
  prefillMsPerToken: number;
  /** One decode step with a single running sequence (time per output token at batch 1). */
  decodeStepMs: number;
  /** Each extra running sequence lengthens a decode step by this fraction of decodeStepMs. */
  batchSlowdown: number;
}

export const PROFILE_KEYS = [
  "kvCapacityBlocks",
  "maxNumSeqs",
  "maxNumBatchedTokens",
  "maxModelLen",
  "prefillBaseMs",
  "prefillMsPerToken",
  "decodeStepMs",
  "batchSlowdown",
] as const satisfies readonly (keyof GpuProfile)[];

export function isProfileKey(name: string): name is keyof GpuProfile {
  return (PROFILE_KEYS as readonly string[]).includes(name);
}

export const PRESET_NAMES = ["a100-7b", "l4-7b", "instant"] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

export function isPresetName(value: string): value is PresetName {
  return (PRESET_NAMES as readonly string[]).includes(value);
}

/** vLLM's paged-attention block size, in tokens. */
export const BLOCK_TOKENS = 16;

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

/**
 * Mistral-7B-v0.1 (Hugging Face model card and config.json): 32 layers, 32 attention heads,
 * 8 key/value heads (grouped-query attention), head dim 4096 / 32 = 128, max_position_embeddings
 * 32768; 7,241,732,096 parameters, served in bf16 (2 bytes each).
 */
const MISTRAL_7B = {
  layers: 32,
  kvHeads: 8,
  headDim: 128,
  bytesPerElement: 2,
  parameters: 7_241_732_096,
  maxPositionEmbeddings: 32_768,
};

/** 14.48e9 bytes (13.49 GiB): vLLM logs "Loading model weights took 13.49 GB" for this model. */
const WEIGHT_BYTES = MISTRAL_7B.parameters * MISTRAL_7B.bytesPerElement;

/** K and V for every layer and KV head: 2 × 32 × 8 × 128 × 2 B = 131,072 B = 128 KiB per token. */
const KV_BYTES_PER_TOKEN =
  2 * MISTRAL_7B.layers * MISTRAL_7B.kvHeads * MISTRAL_7B.headDim * MISTRAL_7B.bytesPerElement;

/** Forward FLOPs per token for a dense decoder: 2 × parameters ≈ 14.5 GFLOP. */
const FLOPS_PER_TOKEN = 2 * MISTRAL_7B.parameters;

/**
 * vLLM sizes the KV cache from what is left of gpu_memory_utilization (default 0.9) × total
 * memory once the weights and the peak of a profiling forward pass (activations, CUDA graphs,
 * non-torch allocations: an estimate, 1.5–2 GiB for a 7B model) are taken out.
 */
function kvBlocks(totalBytes: number, overheadBytes: number): number {
  const free = totalBytes * 0.9 - WEIGHT_BYTES - overheadBytes;
  return Math.floor(free / (KV_BYTES_PER_TOKEN * BLOCK_TOKENS));
}

/**
 * Decode reads every weight once per step, so batch-1 step time is bytes / bandwidth divided by
 * the fraction of peak bandwidth vLLM reaches: ~77%, measured as 75 tok/s for Llama-3.1-8B bf16
 * on an A100 40GB ("vLLM throughput-latency sweep on NVIDIA A100", johnmusgrave.com).
 */
const DECODE_BANDWIDTH_EFFICIENCY = 0.77;

/** Prefill is compute-bound; ~55% model FLOPs utilisation is typical of vLLM prefill. */
const PREFILL_MFU = 0.55;

/**
 * vLLM v1's default --max-num-batched-tokens for its OpenAI server (chunked prefill is on by
 * default): 8192 on GPUs of 70 GiB or more except the A100 (PR #17885: a larger budget lowered
 * A100 throughput), 2048 everywhere else — so 2048 for both presets here
 * (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults).
 */
const VLLM_SERVER_BATCHED_TOKENS = 2048;

/** API server, tokenizer and scheduler time around the first forward pass (~6 ms). */
const SERVER_OVERHEAD_MS = 6;

function decodeStepMsFor(bandwidthBytesPerS: number): number {
  return round((WEIGHT_BYTES / bandwidthBytesPerS / DECODE_BANDWIDTH_EFFICIENCY) * 1000, 1);
}

function prefillMsPerTokenFor(peakFlops: number): number {
  return round((FLOPS_PER_TOKEN / (peakFlops * PREFILL_MFU)) * 1000, 3);
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/**
 * NVIDIA A100-SXM4-80GB: nvidia-smi reports 81,920 MiB; 2,039 GB/s HBM2e; 312 TFLOPS dense
 * bf16 (A100 datasheet). Overhead estimate 2 GiB (default max_num_batched_tokens profiling run).
 *   KV: (80 GiB × 0.9 − 14.48 GB − 2 GiB) / (128 KiB × 16) = 28,933 blocks ≈ 463k tokens
 *   decode: 14.48 GB / 2,039 GB/s = 7.10 ms floor / 0.77 ≈ 9.2 ms per step (~108 tok/s)
 *   prefill: 14.5 GFLOP / (312 TFLOPS × 0.55) ≈ 0.084 ms per token (~11.9k tok/s)
 *   base: one weight pass (9.2 ms) + 6 ms server overhead ≈ 15 ms TTFT for a short prompt
 *   batchSlowdown 0.03: the same sweep gained 6.6× throughput at 8 concurrent requests, so a
 *   step at batch 8 is 8 / 6.6 = 1.21× the batch-1 step: (1.21 − 1) / 7 ≈ 0.03. At 256 sequences
 *   that gives 256 / (9.2 ms × 8.65) ≈ 3.2k output tok/s, in line with public A100 7B figures
 *   (3,363 tok/s for DeepSeek-R1-Distill-Qwen-7B on 1× A100 80GB, morphllm.com vLLM benchmarks).
 */
const A100_7B: GpuProfile = {
  kvCapacityBlocks: kvBlocks(81_920 * MiB, 2 * GiB),
  maxNumSeqs: 256,
  maxNumBatchedTokens: VLLM_SERVER_BATCHED_TOKENS,
  maxModelLen: MISTRAL_7B.maxPositionEmbeddings,
  prefillBaseMs: round(decodeStepMsFor(2_039e9) + SERVER_OVERHEAD_MS, 1),
  prefillMsPerToken: prefillMsPerTokenFor(312e12),
  decodeStepMs: decodeStepMsFor(2_039e9),
  batchSlowdown: 0.03,
};

/**
 * NVIDIA L4: nvidia-smi reports 23,034 MiB; 300 GB/s GDDR6; 121 TFLOPS dense bf16 (L4
 * datasheet: 242.5 with sparsity). Overhead estimate 1.5 GiB.
 *   KV: (23,034 MiB × 0.9 − 14.48 GB − 1.5 GiB) / 2 MiB = 2,691 blocks ≈ 43k tokens, just over
 *       the 32,768-token context, which vLLM requires to start
 *   decode: 14.48 GB / 300 GB/s = 48.3 ms floor / 0.77 ≈ 62.7 ms per step (~16 tok/s)
 *   prefill: 14.5 GFLOP / (121 TFLOPS × 0.55) ≈ 0.218 ms per token
 *   base: 62.7 ms weight pass + 6 ms server overhead ≈ 68.7 ms
 *   batchSlowdown 0.02: a sequence's own cost in a step is its KV reads (same share of the step
 *   on both GPUs, bandwidth scales both) plus its FLOPs (a smaller share on L4, whose FLOPs per
 *   byte of bandwidth are higher); scaling the A100 fit by that ratio gives ≈ 0.02.
 */
const L4_7B: GpuProfile = {
  kvCapacityBlocks: kvBlocks(23_034 * MiB, 1.5 * GiB),
  maxNumSeqs: 256,
  maxNumBatchedTokens: VLLM_SERVER_BATCHED_TOKENS,
  maxModelLen: MISTRAL_7B.maxPositionEmbeddings,
  prefillBaseMs: round(decodeStepMsFor(300e9) + SERVER_OVERHEAD_MS, 1),
  prefillMsPerToken: prefillMsPerTokenFor(121e12),
  decodeStepMs: decodeStepMsFor(300e9),
  batchSlowdown: 0.02,
};

/**
 * No latency anywhere, for functional tests and for measuring a gateway's own overhead. The cache
 * still works (tests assert cached_tokens) but is large: 262,144 blocks = 4M tokens.
 */
const INSTANT: GpuProfile = {
  kvCapacityBlocks: 262_144,
  maxNumSeqs: 65_536,
  maxNumBatchedTokens: 1_048_576,
  maxModelLen: 1_048_576,
  prefillBaseMs: 0,
  prefillMsPerToken: 0,
  decodeStepMs: 0,
  batchSlowdown: 0,
};

export const PRESETS: Readonly<Record<PresetName, Readonly<GpuProfile>>> = {
  "a100-7b": A100_7B,
  "l4-7b": L4_7B,
  instant: INSTANT,
};
