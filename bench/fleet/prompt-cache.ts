import type { PrefixCache } from "./kv-cache.ts";
import { outputText } from "./output-text.ts";
import { BLOCK_TOKENS } from "./presets.ts";
import { textBlocks, type PromptBlocks } from "./prompt-blocks.ts";

/**
 * A prompt's admission to the engine: the tokens its prefix cache holds, and the prompt cached
 * from then on. vLLM always recomputes at least the last prompt token, so a fully cached prompt
 * hits one block short when its length is a multiple of the block size.
 */
export function admitPrompt(cache: PrefixCache, prompt: PromptBlocks): number {
  const limit = Math.floor((prompt.tokens - 1) / BLOCK_TOKENS);
  const cached = cache.match(prompt.chain, limit) * BLOCK_TOKENS;
  cache.insert(prompt.chain);
  return cached;
}

/** The answer's KV blocks stay cached, so the conversation's next turn hits through it. */
export function cacheAnswer(cache: PrefixCache, promptText: string, prompt: PromptBlocks, outputTokens: number): void {
  cache.insert(textBlocks(promptText + outputText(outputTokens), prompt.chain).chain);
}
