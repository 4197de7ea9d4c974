/**
 * What a streamed chat completion said, read event by event: when the first output arrived, the
 * reply text (only when the caller will append it), the usage of the final chunk, [DONE], and an
 * error event. A chunk is JSON-parsed only when something in it is still needed, so replaying
 * many streams does not spend the client's CPU on tokens nobody reads.
 */

export interface Usage {
  promptTokens: number | null;
  cachedTokens: number | null;
  completionTokens: number | null;
}

type Json = Record<string, unknown>;

function isJson(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function count(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

export function errorMessage(data: string): string {
  try {
    const parsed: unknown = JSON.parse(data);
    if (isJson(parsed)) {
      const error = parsed.error;
      if (typeof error === "string") return error;
      if (isJson(error) && typeof error.message === "string") return error.message;
      if (typeof parsed.message === "string") return parsed.message;
    }
  } catch {
    // Not JSON: the text is the message.
  }
  return data.length > 300 ? `${data.slice(0, 300)}…` : data;
}

export class StreamReply {
  /** performance.now() of the chunk that carried the first output. */
  firstOutputAt: number | null = null;
  done = false;
  error: string | null = null;
  usage: Usage | null = null;
  private readonly parts: string[] | null;

  constructor(collectText: boolean) {
    this.parts = collectText ? [] : null;
  }

  get text(): string {
    return this.parts === null ? "" : this.parts.join("");
  }

  onEvent(event: string, data: string, at: number): void {
    if (event === "error") {
      this.error ??= `error event: ${errorMessage(data)}`;
      return;
    }
    if (data === "[DONE]") {
      this.done = true;
      return;
    }
    if (!data.includes('"usage"') && !data.includes('"error"')) {
      if (this.parts === null && this.firstOutputAt !== null) return;
      const text = plainDeltaContent(data);
      if (text !== null) return this.output(text, text !== "", at);
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      this.error ??= `malformed event data: ${data.slice(0, 120)}`;
      return;
    }
    if (!isJson(chunk)) return;
    // OpenAI and recent vLLM send {"error": {...}}; older vLLM an ErrorResponse, {"object": "error", "message": ...}.
    if ((chunk.error !== undefined && chunk.error !== null) || chunk.object === "error") {
      this.error ??= `error in stream: ${errorMessage(data)}`;
      return;
    }
    const choice = Array.isArray(chunk.choices) ? chunk.choices[0] : undefined;
    if (isJson(choice)) this.readChoice(choice, at);
    if (isJson(chunk.usage)) {
      const details = chunk.usage.prompt_tokens_details;
      this.usage = {
        promptTokens: count(chunk.usage.prompt_tokens),
        cachedTokens: isJson(details) ? count(details.cached_tokens) : null,
        completionTokens: count(chunk.usage.completion_tokens),
      };
    }
  }

  private readChoice(choice: Json, at: number): void {
    const delta = choice.delta;
    if (isJson(delta)) {
      const text = typeof delta.content === "string" ? delta.content : "";
      this.output(text, text !== "" || (Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0), at);
    } else if (typeof choice.text === "string") {
      this.output(choice.text, choice.text !== "", at);
    }
  }

  private output(text: string, produced: boolean, at: number): void {
    if (produced && this.firstOutputAt === null) this.firstOutputAt = at;
    if (text !== "" && this.parts !== null) this.parts.push(text);
  }
}

const PLAIN_DELTA = '"delta":{"content":"';

/**
 * The content of a token event whose delta holds content and nothing else, read without parsing
 * the event; null sends the event to JSON.parse (other shapes, or escapes in the text).
 */
function plainDeltaContent(data: string): string | null {
  const at = data.indexOf(PLAIN_DELTA);
  if (at === -1) return null;
  const start = at + PLAIN_DELTA.length;
  const end = data.indexOf('"', start);
  if (end === -1 || data.charCodeAt(end + 1) !== 0x7d) return null;
  const text = data.slice(start, end);
  return text.includes("\\") ? null : text;
}
