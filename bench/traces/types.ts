/** The shape of a benchmark trace: sessions that run concurrently, each a list of turns in order. */

export type TraceKind = "multi-turn" | "rag" | "tool-loop" | "single-turn" | "hot-prefix";

export const TRACE_KINDS: readonly TraceKind[] = ["multi-turn", "rag", "tool-loop", "single-turn", "hot-prefix"];

export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string;
  tool_call_id?: string;
  tool_calls?: unknown[];
}

export interface Turn {
  /** Messages this turn adds to the session's history (user turn, tool results...). */
  add: ChatMessage[];
  /** When true the request is sent as history + add (a conversation); when false as `add` alone (an independent request). */
  withHistory: boolean;
  /** Append the assistant reply the server actually returned to the history afterwards (real client behaviour: the reply is what the server cached). */
  appendReply: boolean;
  maxTokens: number;
}

export interface Session {
  id: string;
  turns: Turn[];
}

export interface Trace {
  kind: TraceKind;
  seed: number;
  sessions: Session[];
  /** The options that shaped this trace (those its kind reads), for a results file. */
  params: Record<string, number | string>;
}
