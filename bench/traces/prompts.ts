import type { Rng } from "./prng.ts";
import { prose, title } from "./words.ts";

/** The kinds of text trace messages are made of, each at a requested size in bytes. */

export function systemPrompt(rng: Rng, bytes: number): string {
  const head = `You are the ${title(rng)} assistant. Follow the guidelines below in every answer.\n\n`;
  return head + prose(rng, Math.max(0, bytes - head.length));
}

/** A titled document, as retrieval or a user's paste would supply it. */
export function documentText(rng: Rng, bytes: number, label: string): string {
  const head = `[${label}] ${title(rng)}\n`;
  return head + prose(rng, Math.max(0, bytes - head.length));
}

/**
 * A prompt no other request shares: the nonce comes first, so even the first 16-token block
 * (64 bytes, after the role tag) differs and no cache can hit on it.
 */
export function uniquePrompt(rng: Rng, bytes: number, nonce: string): string {
  const head = `[${nonce}-${rng.hex()}${rng.hex()}] `;
  return head + prose(rng, Math.max(0, bytes - head.length));
}
