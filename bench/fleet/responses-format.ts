import { outputText, tokenJson } from "./output-text.ts";
import type { FinishReason, ResponseHead, UsageCounts, WireFormat } from "./wire-format.ts";

/**
 * The Responses API (POST /v1/responses) as vLLM and OpenAI write it: one `response` object with
 * an assistant message in `output`; streamed, typed events each with a `sequence_number` —
 * response.created, response.in_progress, the message and its text part added, one
 * response.output_text.delta per token, then the text, part and message done and
 * response.completed (response.incomplete when the answer reached max_output_tokens). No [DONE].
 */

/** Events before the first delta; the deltas' sequence numbers follow them. */
const OPENING_EVENTS = 4;

type Status = "in_progress" | "completed" | "incomplete";

function event(type: string, json: string): string {
  return `event: ${type}\ndata: ${json}\n\n`;
}

function messageId(head: ResponseHead): string {
  return `msg_${head.id.slice("resp_".length)}`;
}

function usageJson(u: UsageCounts): string {
  return (
    `{"input_tokens":${u.promptTokens},"input_tokens_details":{"cached_tokens":${u.cachedTokens}},` +
    `"output_tokens":${u.completionTokens},"output_tokens_details":{"reasoning_tokens":0},"total_tokens":${u.promptTokens + u.completionTokens}}`
  );
}

function textPart(text: string): string {
  return `{"type":"output_text","text":"${text}","annotations":[],"logprobs":[]}`;
}

function message(head: ResponseHead, status: Status, content: string): string {
  return `{"id":"${messageId(head)}","type":"message","status":"${status}","role":"assistant","content":[${content}]}`;
}

function response(head: ResponseHead, status: Status, output: string, usage: string): string {
  const incomplete = status === "incomplete" ? '{"reason":"max_output_tokens"}' : "null";
  return (
    `{"id":"${head.id}","object":"response","created_at":${head.created},"status":"${status}","background":false,"error":null,` +
    `"incomplete_details":${incomplete},${head.echoJson}"model":${head.modelJson},"output":[${output}],"parallel_tool_calls":true,` +
    `"text":{"format":{"type":"text"}},"tool_choice":"auto","truncation":"disabled","metadata":{},"usage":${usage}}`
  );
}

function finalStatus(finish: FinishReason): Status {
  return finish === "length" ? "incomplete" : "completed";
}

export const RESPONSES_FORMAT: WireFormat = {
  idPrefix: "resp_",
  body(head, completionTokens, finish, usage) {
    const status = finalStatus(finish);
    return response(head, status, message(head, status, textPart(outputText(completionTokens))), usageJson(usage));
  },
  roleEvent(head) {
    const open = response(head, "in_progress", "", "null");
    const part = `"item_id":"${messageId(head)}","output_index":0,"content_index":0`;
    return (
      event("response.created", `{"type":"response.created","sequence_number":0,"response":${open}}`) +
      event("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":${open}}`) +
      event("response.output_item.added", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":${message(head, "in_progress", "")}}`) +
      event("response.content_part.added", `{"type":"response.content_part.added","sequence_number":3,${part},"part":${textPart("")}}`)
    );
  },
  tokenPrefix(head) {
    return `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"${messageId(head)}","output_index":0,"content_index":0,"logprobs":[],"delta":`;
  },
  tokenEvent(prefix, index) {
    return `${prefix}${tokenJson(index)},"sequence_number":${OPENING_EVENTS + index}}\n\n`;
  },
  streamEnd(head, completionTokens, finish, usage) {
    const text = outputText(completionTokens);
    const status = finalStatus(finish);
    const part = `"item_id":"${messageId(head)}","output_index":0,"content_index":0`;
    const done = message(head, status, textPart(text));
    const last = status === "completed" ? "response.completed" : "response.incomplete";
    let seq = OPENING_EVENTS + completionTokens;
    return (
      event("response.output_text.done", `{"type":"response.output_text.done","sequence_number":${seq++},${part},"text":"${text}","logprobs":[]}`) +
      event("response.content_part.done", `{"type":"response.content_part.done","sequence_number":${seq++},${part},"part":${textPart(text)}}`) +
      event("response.output_item.done", `{"type":"response.output_item.done","sequence_number":${seq++},"output_index":0,"item":${done}}`) +
      event(last, `{"type":"${last}","sequence_number":${seq},"response":${response(head, status, done, usageJson(usage))}}`)
    );
  },
};

const ECHOED = ["instructions", "max_output_tokens", "previous_response_id", "temperature", "top_p"] as const;

/** The request fields a response object repeats, as JSON members ahead of `model`. */
export function responsesEcho(body: Record<string, unknown>): string {
  let out = "";
  for (const key of ECHOED) out += `"${key}":${JSON.stringify(body[key] ?? null)},`;
  return `${out}"tools":${JSON.stringify(Array.isArray(body.tools) ? body.tools : [])},`;
}
