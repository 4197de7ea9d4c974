import { outputText, tokenJson } from "./output-text.ts";

/**
 * Response bodies and SSE events as vLLM writes them: compact JSON, fields in vLLM's order. Built
 * by concatenating fixed fragments — the per-request part (id, created, model) once per request,
 * then one token literal per event — so no object is serialised per token.
 */

export type FinishReason = "stop" | "length";

export interface ResponseHead {
  id: string;
  created: number;
  /** The served model name as a JSON string literal. */
  modelJson: string;
  /** Request fields the answer repeats, as `"key":value,` JSON members ("" when it repeats none). */
  echoJson: string;
}

export interface UsageCounts {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}

export interface WireFormat {
  readonly idPrefix: string;
  body(head: ResponseHead, completionTokens: number, finish: FinishReason, usage: UsageCounts): string;
  /** Event announcing the assistant role, sent before the first token (empty for completions). */
  roleEvent(head: ResponseHead): string;
  /** Per-request prefix of every token event; pass it to tokenEvent. */
  tokenPrefix(head: ResponseHead): string;
  tokenEvent(prefix: string, index: number, finish: FinishReason | null): string;
  /** What a stream ends with after its last token: usage (when asked for) and [DONE], or the closing events. */
  streamEnd(head: ResponseHead, completionTokens: number, finish: FinishReason, usage: UsageCounts, includeUsage: boolean): string;
}

export const DONE_EVENT = "data: [DONE]\n\n";

function usageJson(u: UsageCounts): string {
  return (
    `{"prompt_tokens":${u.promptTokens},"total_tokens":${u.promptTokens + u.completionTokens},` +
    `"completion_tokens":${u.completionTokens},"prompt_tokens_details":{"cached_tokens":${u.cachedTokens}}}`
  );
}

function headJson(head: ResponseHead, object: string): string {
  return `{"id":"${head.id}","object":"${object}","created":${head.created},"model":${head.modelJson}`;
}

const CHAT_TAIL_OPEN = '},"logprobs":null,"finish_reason":null}]}\n\n';
const CHAT_TAIL_STOP = '},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n';
const CHAT_TAIL_LENGTH = '},"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n';

export const CHAT_FORMAT: WireFormat = {
  idPrefix: "chatcmpl-",
  body(head, completionTokens, finish, usage) {
    return (
      headJson(head, "chat.completion") +
      `,"choices":[{"index":0,"message":{"role":"assistant","content":"${outputText(completionTokens)}"},` +
      `"logprobs":null,"finish_reason":"${finish}","stop_reason":null}],"usage":${usageJson(usage)}}`
    );
  },
  roleEvent(head) {
    return `data: ${headJson(head, "chat.completion.chunk")},"choices":[{"index":0,"delta":{"role":"assistant","content":""${CHAT_TAIL_OPEN}`;
  },
  tokenPrefix(head) {
    return `data: ${headJson(head, "chat.completion.chunk")},"choices":[{"index":0,"delta":{"content":`;
  },
  tokenEvent(prefix, index, finish) {
    const tail = finish === null ? CHAT_TAIL_OPEN : finish === "length" ? CHAT_TAIL_LENGTH : CHAT_TAIL_STOP;
    return prefix + tokenJson(index) + tail;
  },
  streamEnd(head, _tokens, _finish, usage, includeUsage) {
    return includeUsage ? `data: ${headJson(head, "chat.completion.chunk")},"choices":[],"usage":${usageJson(usage)}}\n\n${DONE_EVENT}` : DONE_EVENT;
  },
};

const TEXT_TAIL_OPEN = ',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n';
const TEXT_TAIL_STOP = ',"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n';
const TEXT_TAIL_LENGTH = ',"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n';

export const COMPLETION_FORMAT: WireFormat = {
  idPrefix: "cmpl-",
  body(head, completionTokens, finish, usage) {
    return (
      headJson(head, "text_completion") +
      `,"choices":[{"index":0,"text":"${outputText(completionTokens)}","logprobs":null,` +
      `"finish_reason":"${finish}","stop_reason":null,"prompt_logprobs":null}],"usage":${usageJson(usage)}}`
    );
  },
  roleEvent() {
    return "";
  },
  tokenPrefix(head) {
    return `data: ${headJson(head, "text_completion")},"choices":[{"index":0,"text":`;
  },
  tokenEvent(prefix, index, finish) {
    const tail = finish === null ? TEXT_TAIL_OPEN : finish === "length" ? TEXT_TAIL_LENGTH : TEXT_TAIL_STOP;
    return prefix + tokenJson(index) + tail;
  },
  streamEnd(head, _tokens, _finish, usage, includeUsage) {
    return includeUsage ? `data: ${headJson(head, "text_completion")},"choices":[],"usage":${usageJson(usage)}}\n\n${DONE_EVENT}` : DONE_EVENT;
  },
};
