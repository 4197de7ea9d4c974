import type { Session, Trace } from "../traces/types.ts";
import { keepAliveAgent } from "./http-stream.ts";
import { bodyFrame } from "./request-body.ts";
import { sendTurn, type Endpoint } from "./send-turn.ts";
import type { ReplayOptions, ReplayResult, RequestResult } from "./types.ts";

const DEFAULT_TIMEOUT_MS = 120_000;

/**
 * Replays a trace against an OpenAI-compatible server: every session at once, each session's
 * turns one after another, each request streamed. Failures are recorded per request and the
 * session goes on; the promise only rejects on a bad base URL.
 */
export async function replay(trace: Trace, opts: ReplayOptions): Promise<ReplayResult> {
  const url = new URL(`${opts.baseUrl.replace(/\/+$/, "")}/v1/chat/completions`);
  const agent = keepAliveAgent(url);
  const endpoint: Endpoint = {
    url,
    agent,
    headers: {
      "content-type": "application/json",
      accept: "text/event-stream",
      ...(opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {}),
      ...opts.headers,
    },
    body: bodyFrame(opts.model, opts.extraBody ?? {}),
    timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  };
  const started = performance.now();
  try {
    const perSession = await Promise.all(trace.sessions.map((session) => replaySession(endpoint, session)));
    return { requests: perSession.flat(), wallMs: performance.now() - started };
  } finally {
    agent.destroy();
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
