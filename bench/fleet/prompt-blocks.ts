import { fmix32 } from "../../src/prefix/block-hasher.ts";
import { BLOCK_TOKENS } from "./presets.ts";

/**
 * Tokens as the simulated model sees them: every 4 bytes of UTF-8 is one token (a common rule of
 * thumb for BPE vocabularies on English text), and every 16 tokens a KV block. A block's hash
 * covers all blocks before it, so equal hashes at position i mean equal prefixes up to block i,
 * which is what makes vLLM's prefix cache hit only on a shared prefix.
 */

export const BYTES_PER_TOKEN = 4;
const BLOCK_BYTES = BLOCK_TOKENS * BYTES_PER_TOKEN;
const BLOCK_WORDS = BLOCK_BYTES / 4;

export interface PromptBlocks {
  tokens: number;
  /** Hash of each full block; chain[i] covers blocks 0..i. */
  chain: number[];
}

// One reusable buffer: rendering a prompt would otherwise allocate a Buffer per request.
let scratch = Buffer.allocUnsafeSlow(64 * 1024);
let words = new Uint32Array(scratch.buffer, scratch.byteOffset, scratch.length / 4);

function reserve(bytes: number): void {
  if (bytes <= scratch.length) return;
  const size = Math.ceil(Math.max(bytes, scratch.length * 2) / BLOCK_BYTES) * BLOCK_BYTES;
  scratch = Buffer.allocUnsafeSlow(size);
  words = new Uint32Array(scratch.buffer, scratch.byteOffset, size / 4);
}

export function tokensForBytes(bytes: number): number {
  return Math.ceil(bytes / BYTES_PER_TOKEN);
}

/**
 * Blocks of a text. Pass the chain of a prefix of `text` (a prompt, when `text` is that prompt
 * plus its output) to hash only the blocks after it.
 */
export function textBlocks(text: string, prefixChain: readonly number[] = []): PromptBlocks {
  // UTF-8 needs at most 3 bytes per UTF-16 code unit; measuring exactly only when that bound
  // would grow the buffer keeps the common case to a single pass.
  if (text.length * 3 > scratch.length) reserve(Buffer.byteLength(text));
  const bytes = scratch.write(text, 0, "utf8");
  return { tokens: tokensForBytes(bytes), chain: extendChain(bytes, prefixChain) };
}

/** Blocks of a prompt given as token ids: each id is one 4-byte token. */
export function tokenIdBlocks(ids: readonly number[]): PromptBlocks {
  reserve(ids.length * 4);
  for (let i = 0; i < ids.length; i++) words[i] = ids[i] ?? 0;
  return { tokens: ids.length, chain: extendChain(ids.length * 4, []) };
}

function extendChain(bytes: number, prefixChain: readonly number[]): number[] {
  const full = Math.floor(bytes / BLOCK_BYTES);
  const chain = prefixChain.slice(0, full);
  let prev = chain.length > 0 ? (chain[chain.length - 1] ?? 0) : 0;
  for (let block = chain.length; block < full; block++) {
    prev = hashBlock(block * BLOCK_WORDS, prev);
    chain.push(prev);
  }
  return chain;
}

/** Two 32-bit multiply-rotate lanes seeded by the previous block's hash, mixed to 53 bits. */
function hashBlock(start: number, prev: number): number {
  let a = (prev >>> 0) ^ 0x9e3779b9;
  let b = Math.floor(prev / 0x100000000) ^ 0x7f4a7c15;
  for (let i = start; i < start + BLOCK_WORDS; i++) {
    const w = words[i] ?? 0;
    a = Math.imul(a ^ w, 0x85ebca6b);
    a = (a << 13) | (a >>> 19);
    b = Math.imul(b ^ w, 0xc2b2ae35);
    b = (b << 17) | (b >>> 15);
  }
  return (fmix32(a ^ b) & 0x1fffff) * 0x100000000 + fmix32(b + Math.imul(a, 5));
}
