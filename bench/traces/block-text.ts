import { BLOCK_TOKENS } from "../fleet/presets.ts";
import { BYTES_PER_TOKEN } from "../fleet/prompt-blocks.ts";
import { renderChat } from "../fleet/prompt-render.ts";
import { streamFor } from "./prng.ts";
import { prose } from "./words.ts";

/**
 * Text for a prompt given as a chain of block ids (the Mooncake traces: 512 tokens a block), so
 * that equal ids give byte-equal text and the prompt's prefix structure is exactly the trace's.
 *
 * Lined up with the fleet simulator's cache (bench/fleet/prompt-blocks.ts): it counts 4 bytes of
 * the rendered chat as a token and caches 16-token (64-byte) blocks from the start of the
 * rendered text. A trace block is 512 × 4 = 2,048 bytes of ASCII, exactly 32 simulator blocks,
 * and the text before the first one — the chat template's user tag plus a header line — is padded
 * to a whole 64 bytes. So trace block i covers simulator blocks 1 + 32i … 32 + 32i, a prefix of k
 * equal trace blocks is 1 + 32k equal simulator blocks, and the simulator reports exactly
 * 16 + 512k cached tokens for it (the header's block is shared by requests with the same first id).
 */

export const TRACE_BLOCK_TOKENS = 512;
const TRACE_BLOCK_BYTES = TRACE_BLOCK_TOKENS * BYTES_PER_TOKEN;
const SIM_BLOCK_BYTES = BLOCK_TOKENS * BYTES_PER_TOKEN;
const TEXT_SEED = 0x6d6f6f6e; // "moon": fixed, so every run renders the same bytes

/** The simulator's chat template around a lone user message: its bytes before and after the text. */
const TEMPLATE = (() => {
  const rendered = renderChat({ messages: [{ role: "user", content: "\u0000" }] });
  if (!("text" in rendered)) throw new Error("the simulator's chat template does not render a user message");
  const at = rendered.text.indexOf("\u0000");
  return { before: Buffer.byteLength(rendered.text.slice(0, at)), after: Buffer.byteLength(rendered.text.slice(at + 1)) };
})();

/** Header bytes that bring the user tag up to a whole number of simulator blocks, with room for its line. */
const HEADER_BYTES = (() => {
  const pad = SIM_BLOCK_BYTES - (TEMPLATE.before % SIM_BLOCK_BYTES);
  return pad >= 24 ? pad : pad + SIM_BLOCK_BYTES;
})();

/** Tokens the simulator counts in a rendered prompt beyond the trace's own: the template and the header. */
export const PROMPT_OVERHEAD_TOKENS = Math.ceil((TEMPLATE.before + HEADER_BYTES + TEMPLATE.after) / BYTES_PER_TOKEN);

/** Names the first block, so only prompts that share it share the header's simulator block. */
function header(firstId: number): string {
  const line = `Context ${firstId}:`;
  return `${line.padEnd(HEADER_BYTES - 1, " ")}\n`;
}

/** Rendering a block costs ~70 µs; conversation prompts repeat their leading blocks, so recent ones are kept. */
const CACHE_LIMIT = 4096;

export class BlockText {
  private readonly cache = new Map<number, string>();

  /** The 2,048 bytes of block `id`: the id, then seeded prose, cut to length. */
  block(id: number): string {
    const hit = this.cache.get(id);
    if (hit !== undefined) {
      this.cache.delete(id);
      this.cache.set(id, hit);
      return hit;
    }
    const text = `${id}. ${prose(streamFor(TEXT_SEED, "block", id), TRACE_BLOCK_BYTES + 256)}`.slice(0, TRACE_BLOCK_BYTES);
    if (text.length !== TRACE_BLOCK_BYTES) throw new Error(`block ${id} rendered ${text.length} bytes`);
    this.cache.set(id, text);
    if (this.cache.size > CACHE_LIMIT) this.cache.delete(this.cache.keys().next().value ?? id);
    return text;
  }

  /** The user message of a prompt of `tokens` tokens over `ids`: the header, then each block, the last cut to length. */
  prompt(ids: readonly number[], tokens: number): string {
    const first = ids[0];
    if (first === undefined) throw new RangeError("a prompt needs at least one block");
    const parts = [header(first)];
    let left = tokens * BYTES_PER_TOKEN;
    for (const id of ids) {
      const text = this.block(id);
      parts.push(left >= text.length ? text : text.slice(0, left));
      left -= text.length;
      if (left <= 0) break;
    }
    return parts.join("");
  }
}
