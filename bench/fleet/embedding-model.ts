import { fmix32 } from "../../src/prefix/block-hasher.ts";
import { mulberry32 } from "../traces/prng.ts";

/**
 * What the simulated model embeds a text to: a deterministic unit vector in which texts that share
 * words point the same way, as a real embedding model's vectors do for related texts. Each word
 * (or token id) adds ±1 on a few dimensions its hash picks (signed feature hashing); a faint dense
 * part seeded by the whole input fills the rest. Every worker embeds a text alike, as replicas of
 * one model do. Cost: a few steps per word plus one per dimension.
 */

/** A text, or a prompt's token ids. */
export type EmbeddingInput = string | readonly number[];

const TAPS_PER_WORD = 8;
const DENSE_WEIGHT = 0.05;
const WORD = /[\p{L}\p{N}]+/gu;

export function embed(input: EmbeddingInput, dimensions: number): Float32Array {
  const v = new Float64Array(dimensions);
  let whole = 0x811c9dc5;
  if (typeof input === "string") {
    for (const word of input.toLowerCase().match(WORD) ?? []) addFeature(v, fnv1a(word));
    whole = fnv1a(input);
  } else {
    for (const id of input) {
      addFeature(v, fmix32(id ^ 0x5bd1e995));
      whole = fmix32(whole ^ id);
    }
  }
  const dense = mulberry32(whole);
  for (let i = 0; i < dimensions; i++) v[i] = (v[i] as number) + DENSE_WEIGHT * (dense.next() * 2 - 1);
  return unit(v);
}

/**
 * The first `dimensions` of a vector, made unit length again: how a Matryoshka model answers a
 * request's `dimensions`.
 */
export function truncate(v: Float32Array, dimensions: number): Float32Array {
  return dimensions >= v.length ? v : unit(v.subarray(0, dimensions));
}

/**
 * How relevant `document` is to `query`, in (0, 1), as a cross-encoder's sigmoid output: near 0
 * for unrelated texts, above 0.5 from about a third of their words in common, near 1 for the same text.
 */
export function relevance(query: Float32Array, document: Float32Array): number {
  let dot = 0;
  for (let i = 0; i < query.length; i++) dot += (query[i] as number) * (document[i] ?? 0);
  return 1 / (1 + Math.exp(3 - 10 * dot));
}

function addFeature(v: Float64Array, hash: number): void {
  const taps = mulberry32(hash);
  for (let t = 0; t < TAPS_PER_WORD; t++) {
    const i = Math.floor(taps.next() * v.length);
    v[i] = (v[i] as number) + (taps.next() < 0.5 ? -1 : 1);
  }
}

function unit(v: ArrayLike<number>): Float32Array {
  let norm = 0;
  for (let i = 0; i < v.length; i++) norm += (v[i] as number) ** 2;
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  const out = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = (v[i] as number) * scale;
  return out;
}

/** FNV-1a, 32 bits, over UTF-16 code units: a word's seed. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
