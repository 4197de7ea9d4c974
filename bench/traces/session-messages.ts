import type { ChatMessage, Session, Turn } from "./types.ts";

/**
 * Each turn of a session with the messages a client sends for it: the history and the turn's own
 * messages for a turn that goes on a conversation, its own alone otherwise. A turn that appends
 * its reply adds `reply(turn, index)` to the history as the assistant's answer; a client replaying
 * against a server appends what the server said instead (bench/replay/replay.ts).
 */
export function* sessionMessages(session: Session, reply: (turn: Turn, index: number) => string): Generator<{ turn: Turn; index: number; messages: ChatMessage[] }> {
  const history: ChatMessage[] = [];
  for (const [index, turn] of session.turns.entries()) {
    yield { turn, index, messages: turn.withHistory ? [...history, ...turn.add] : turn.add };
    if (turn.withHistory) history.push(...turn.add);
    if (turn.appendReply) history.push({ role: "assistant", content: reply(turn, index) });
  }
}
