import { BYTES_PER_TOKEN } from "./prompt-blocks.ts";

/**
 * What the simulated model says: a fixed sentence cut into 4-byte tokens, repeated. Every token
 * is exactly one token's worth of bytes, so when a client sends the answer back as an assistant
 * turn the prompt re-renders to the same bytes and the next turn hits the cache through it, as
 * a real multi-turn conversation does.
 */
const SENTENCE = " The simulated GPU fleet answers every prompt with the same words.";

const TOKENS: readonly string[] = cut(SENTENCE.padEnd(Math.ceil(SENTENCE.length / BYTES_PER_TOKEN) * BYTES_PER_TOKEN));
// Plain ASCII without quotes or backslashes: a token's JSON string is the token in quotes.
const TOKEN_JSON: readonly string[] = TOKENS.map((t) => `"${t}"`);
const CYCLE = TOKENS.join("");

function cut(text: string): string[] {
  if (!/^[\x20-\x7e]*$/.test(text) || /["\\]/.test(text)) throw new Error("output tokens must be JSON-safe ASCII");
  const out: string[] = [];
  for (let i = 0; i < text.length; i += BYTES_PER_TOKEN) out.push(text.slice(i, i + BYTES_PER_TOKEN));
  return out;
}

/** JSON string literal of output token `index`. */
export function tokenJson(index: number): string {
  return TOKEN_JSON[index % TOKEN_JSON.length] ?? '""';
}

/** The first `count` output tokens as one string (JSON-safe as it is). */
export function outputText(count: number): string {
  const whole = Math.floor(count / TOKENS.length);
  return CYCLE.repeat(whole) + CYCLE.slice(0, (count - whole * TOKENS.length) * BYTES_PER_TOKEN);
}
