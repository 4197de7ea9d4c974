import { BLOCK_TOKENS } from "../fleet/presets.ts";
import { textBlocks } from "../fleet/prompt-blocks.ts";
import { renderChat } from "../fleet/prompt-render.ts";
import { sessionMessages } from "./session-messages.ts";
import type { Trace } from "./types.ts";

/**
 * What a trace asks of a prefix cache, counted the way the simulated fleet counts it: each
 * request rendered with the fleet's chat template, cut into 16-token blocks, chain-hashed. A block
 * is shared when more than one session's requests contain it (a system prompt, a popular
 * document's position in a prefix). Replies are not in the trace: each appended one is a stand-in
 * of maxTokens × 4 bytes, what a server that fills max_tokens returns.
 */
export interface TraceFootprint {
  sessions: number;
  requests: number;
  /** Tokens of distinct blocks more than one session uses: cached once per worker that serves them. */
  sharedTokens: number;
  /** Tokens of distinct blocks only one session uses, summed over sessions. */
  privateTokens: number;
  /** Prompt tokens of the largest request, and the mean over requests. */
  maxPromptTokens: number;
  meanPromptTokens: number;
}

const BYTES_PER_TOKEN = 4;

export function traceFootprint(trace: Trace): TraceFootprint {
  // Block hash → the session that first used it, or -1 once a second session has.
  const owner = new Map<number, number>();
  let requests = 0;
  let promptTotal = 0;
  let maxPromptTokens = 0;
  trace.sessions.forEach((session, s) => {
    for (const { index: t, messages } of sessionMessages(session, (turn, t) => standInReply(s, t, turn.maxTokens))) {
      const rendered = renderChat({ messages });
      if (!("text" in rendered)) throw new Error(`session ${session.id} turn ${t} does not render`);
      const { tokens, chain } = textBlocks(rendered.text);
      for (const hash of chain) {
        const first = owner.get(hash);
        if (first === undefined) owner.set(hash, s);
        else if (first !== s) owner.set(hash, -1);
      }
      requests++;
      promptTotal += tokens;
      maxPromptTokens = Math.max(maxPromptTokens, tokens);
    }
  });
  let sharedBlocks = 0;
  for (const first of owner.values()) if (first === -1) sharedBlocks++;
  return {
    sessions: trace.sessions.length,
    requests,
    sharedTokens: sharedBlocks * BLOCK_TOKENS,
    privateTokens: (owner.size - sharedBlocks) * BLOCK_TOKENS,
    maxPromptTokens,
    meanPromptTokens: requests === 0 ? 0 : Math.round(promptTotal / requests),
  };
}

function standInReply(session: number, turn: number, maxTokens: number): string {
  return `reply ${session}.${turn} `.padEnd(maxTokens * BYTES_PER_TOKEN, "-");
}
