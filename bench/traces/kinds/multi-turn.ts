import { kbToBytes, type TraceParams } from "../options.ts";
import { streamFor } from "../prng.ts";
import { documentText, systemPrompt } from "../prompts.ts";
import type { ChatMessage, Session, Turn } from "../types.ts";
import { question } from "../words.ts";

/**
 * Conversations, the shape of llm-cache-router's benchmark: one system prompt shared by every
 * session, short user turns, each request the whole history so far plus the new turn, the
 * server's reply appended after it. `documentKB` pastes a document unique to the session into
 * the first turn, for working sets that pressure the cache.
 */
export const MULTI_TURN_KEYS = ["systemKB", "documentKB", "userMinChars", "userMaxChars"] as const;

export function multiTurnSessions(p: TraceParams): Session[] {
  const system = systemPrompt(streamFor(p.seed, "system"), kbToBytes(p.systemKB));
  const sessions: Session[] = [];
  for (let s = 0; s < p.sessions; s++) {
    const rng = streamFor(p.seed, "session", s);
    const turns: Turn[] = [];
    for (let t = 0; t < p.turns; t++) {
      let text = question(rng, rng.int(p.userMinChars, p.userMaxChars));
      if (t === 0 && p.documentKB > 0) {
        text = `Here is a document I am working on.\n\n${documentText(rng, kbToBytes(p.documentKB), `session ${s}`)}\n\n${text}`;
      }
      const user: ChatMessage = { role: "user", content: text };
      turns.push({
        add: t === 0 ? [{ role: "system", content: system }, user] : [user],
        withHistory: true,
        appendReply: true,
        maxTokens: p.maxTokens,
      });
    }
    sessions.push({ id: `multi-turn-${s}`, turns });
  }
  return sessions;
}
