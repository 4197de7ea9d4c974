import { kbToBytes, type TraceParams } from "../options.ts";
import { streamFor } from "../prng.ts";
import { systemPrompt, uniquePrompt } from "../prompts.ts";
import type { ChatMessage, Session, Turn } from "../types.ts";
import { question } from "../words.ts";

/**
 * One hot prefix: most requests are a long shared system prompt plus a short question of their
 * own, the rest unique prompts. Independent requests. Tests whether a router spreads a hot prefix
 * over enough workers instead of piling it onto one.
 */
export const HOT_PREFIX_KEYS = ["hotPrefixKB", "hotShare", "userMinChars", "userMaxChars", "promptMinKB", "promptMaxKB"] as const;

export function hotPrefixSessions(p: TraceParams): Session[] {
  const hot = systemPrompt(streamFor(p.seed, "system"), kbToBytes(p.hotPrefixKB));
  const sessions: Session[] = [];
  for (let s = 0; s < p.sessions; s++) {
    const rng = streamFor(p.seed, "session", s);
    const turns: Turn[] = [];
    for (let t = 0; t < p.turns; t++) {
      const add: ChatMessage[] = rng.chance(p.hotShare)
        ? [
            { role: "system", content: hot },
            { role: "user", content: question(rng, rng.int(p.userMinChars, p.userMaxChars)) },
          ]
        : [{ role: "user", content: uniquePrompt(rng, rng.int(kbToBytes(p.promptMinKB), kbToBytes(p.promptMaxKB)), `req ${p.seed}.${s}.${t}`) }];
      turns.push({ add, withHistory: false, appendReply: false, maxTokens: p.maxTokens });
    }
    sessions.push({ id: `hot-prefix-${s}`, turns });
  }
  return sessions;
}
