import type { Session, Trace } from "../traces/types.ts";
import { endpointFor, sendTurn, type Endpoint } from "./send-turn.ts";
import type { ReplayOptions, ReplayResult, RequestResult } from "./types.ts";

/**
 * Replays a trace against an OpenAI-compatible server: every session at once, each session's
 * turns one after another, each request streamed. Failures are recorded per request and the
 * session goes on; the promise only rejects on a bad base URL.
 */
export async function replay(trace: Trace, opts: ReplayOptions): Promise<ReplayResult> {
  const endpoint = endpointFor(opts);
  const started = performance.now();
  try {
    const perSession = await Promise.all(trace.sessions.map((session) => replaySession(endpoint, session)));
    return { requests: perSession.flat(), wallMs: performance.now() - started };
  } finally {
    endpoint.agent.destroy();
  }
}

/**
 * One session as a real client runs it. After a failed turn the conversation still moves on with
 * the messages the turn added, but without a reply: there is none to append.
 */
async function replaySession(endpoint: Endpoint, session: Session): Promise<RequestResult[]> {
  const history: string[] = [];
  const results: RequestResult[] = [];
  for (const [index, turn] of session.turns.entries()) {
    const added = turn.add.map((message) => JSON.stringify(message));
    const { result, text } = await sendTurn(endpoint, {
      session: session.id,
      turn: index,
      messagesJson: turn.withHistory ? [...history, ...added] : added,
      maxTokens: turn.maxTokens,
      collectText: turn.appendReply,
    });
    results.push(result);
    if (turn.withHistory) history.push(...added);
    if (turn.appendReply && result.error === null) history.push(JSON.stringify({ role: "assistant", content: text }));
  }
  return results;
}
