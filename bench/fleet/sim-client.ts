/**
 * A small client for the simulated fleet (fetch-based), shared by its tests and benchmarks: a
 * JSON POST, and an SSE reader that timestamps each event as it arrives and tells a stream that
 * ended with [DONE] from one that merely ended or broke.
 */

export interface JsonReply {
  status: number;
  headers: Headers;
  json: unknown;
}

export async function postJson(url: string, body: unknown, signal?: AbortSignal): Promise<JsonReply> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal: signal ?? null,
  });
  const text = await res.text();
  let json: unknown = text;
  try {
    json = JSON.parse(text);
  } catch {
    // Not JSON: keep the text, a test will say what it expected.
  }
  return { status: res.status, headers: res.headers, json };
}

export async function getJson(url: string): Promise<JsonReply> {
  const res = await fetch(url);
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text === "" ? null : JSON.parse(text) };
}

export interface SseEvent {
  /** The data field, "[DONE]" included. */
  data: string;
  /** performance.now() when the event's last byte arrived. */
  at: number;
}

export interface SseRead {
  status: number;
  contentType: string | null;
  events: SseEvent[];
  /** "done": [DONE] then a clean end; "eof": clean end without [DONE]; "error": the connection broke or was aborted. */
  ended: "done" | "eof" | "error";
  error?: string;
}

export async function readSse(url: string, body: unknown, signal?: AbortSignal): Promise<SseRead> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: signal ?? null,
  });
  const read: SseRead = { status: res.status, contentType: res.headers.get("content-type"), events: [], ended: "eof" };
  if (!res.body) return read;
  const decoder = new TextDecoder();
  let buffered = "";
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffered.indexOf("\n\n")) !== -1) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const data = block
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trimStart())
          .join("\n");
        read.events.push({ data, at: performance.now() });
      }
    }
    read.ended = read.events.at(-1)?.data === "[DONE]" ? "done" : "eof";
  } catch (error) {
    read.ended = "error";
    read.error = error instanceof Error ? error.message : String(error);
  }
  return read;
}

/** The response shapes the simulator writes, for readers of its replies. */
export interface UsageBody {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export interface CompletionBody {
  id: string;
  object: "chat.completion" | "text_completion";
  created: number;
  model: string;
  choices: {
    index: number;
    message?: { role: string; content: string };
    text?: string;
    finish_reason: "stop" | "length";
  }[];
  usage: UsageBody;
}

export interface ChunkBody {
  id: string;
  object: "chat.completion.chunk" | "text_completion";
  model: string;
  choices: {
    index: number;
    delta?: { role?: string; content?: string };
    text?: string;
    finish_reason: "stop" | "length" | null;
  }[];
  usage?: UsageBody;
}

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: number };
}
