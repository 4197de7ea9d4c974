import { kbToBytes, type TraceParams } from "../options.ts";
import { streamFor } from "../prng.ts";
import { uniquePrompt } from "../prompts.ts";
import type { Session, Turn } from "../types.ts";

/** Unique prompts, independent requests: no reuse at all, the case where affinity cannot help. */
export const SINGLE_TURN_KEYS = ["promptMinKB", "promptMaxKB"] as const;

export function singleTurnSessions(p: TraceParams): Session[] {
  const sessions: Session[] = [];
  for (let s = 0; s < p.sessions; s++) {
    const rng = streamFor(p.seed, "session", s);
    const turns: Turn[] = [];
    for (let t = 0; t < p.turns; t++) {
      const bytes = rng.int(kbToBytes(p.promptMinKB), kbToBytes(p.promptMaxKB));
      turns.push({
        add: [{ role: "user", content: uniquePrompt(rng, bytes, `req ${p.seed}.${s}.${t}`) }],
        withHistory: false,
        appendReply: false,
        maxTokens: p.maxTokens,
      });
    }
    sessions.push({ id: `single-turn-${s}`, turns });
  }
  return sessions;
}
