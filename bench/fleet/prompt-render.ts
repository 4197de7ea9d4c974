import { isRecord } from "./is-record.ts";

/**
 * The prompt as the simulated model sees it, standing in for a chat template: tools first (as
 * templates put them in the system turn), then each message as role tag, text, tool calls and an
 * end tag, then the assistant tag that opens the generation. A conversation's next turn renders
 * to this prompt, plus the model's answer, plus the new messages, so it shares the prefix.
 */

export type RenderedPrompt = { ok: true; text: string } | { ok: true; tokenIds: number[] } | { ok: false; message: string; param: string };

const END = "<|end|>\n";
const GENERATION_PROMPT = "<|assistant|>\n";

export function renderChat(body: Record<string, unknown>): RenderedPrompt {
  const { messages, tools } = body;
  if (!Array.isArray(messages) || messages.length === 0) {
    return { ok: false, message: "messages must be a non-empty array", param: "messages" };
  }
  let text = "";
  if (Array.isArray(tools) && tools.length > 0) text += `<|tools|>\n${JSON.stringify(tools)}${END}`;
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isRecord(m) || typeof m.role !== "string") {
      return { ok: false, message: `messages[${i}] must be an object with a string role`, param: "messages" };
    }
    text += typeof m.name === "string" ? `<|${m.role}:${m.name}|>\n` : `<|${m.role}|>\n`;
    text += renderContent(m.content);
    if (Array.isArray(m.tool_calls)) text += renderToolCalls(m.tool_calls);
    text += END;
  }
  return { ok: true, text: text + GENERATION_PROMPT };
}

function renderContent(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let text = "";
  for (const part of content) {
    if (!isRecord(part)) continue;
    if (typeof part.text === "string") text += part.text;
    else if (isRecord(part.image_url) && typeof part.image_url.url === "string") text += `<|image|>${part.image_url.url}`;
    else text += JSON.stringify(part);
  }
  return text;
}

/** Templates render a call's name and arguments; call ids are the client's bookkeeping. */
function renderToolCalls(calls: unknown[]): string {
  let text = "";
  for (const call of calls) {
    const fn = isRecord(call) ? call.function : undefined;
    // Any JSON may arrive here: String() of an object whose toString is not a function throws.
    if (isRecord(fn)) text += `<|tool_call|>${asText(fn.name)}(${asText(fn.arguments)})`;
  }
  return text;
}

function asText(value: unknown): string {
  return typeof value === "string" ? value : (JSON.stringify(value) ?? "");
}

/**
 * A Responses API request, rendered as the chat it stands for (as vLLM builds it): `instructions`
 * as a system message, a string `input` as a user message; of input items, messages as they are,
 * a function call as an assistant tool call, its output as a tool message, any other item as its JSON.
 */
export function renderResponses(body: Record<string, unknown>): RenderedPrompt {
  const { input, instructions, tools } = body;
  const messages: unknown[] = [];
  if (typeof instructions === "string" && instructions !== "") messages.push({ role: "system", content: instructions });
  if (typeof input === "string") messages.push({ role: "user", content: input });
  else if (Array.isArray(input) && input.length > 0) {
    for (let i = 0; i < input.length; i++) {
      const item: unknown = input[i];
      if (!isRecord(item)) return { ok: false, message: `input[${i}] must be an object`, param: "input" };
      messages.push(itemMessage(item));
    }
  } else return { ok: false, message: "input must be a string or a non-empty array of items", param: "input" };
  return renderChat({ messages, tools });
}

function itemMessage(item: Record<string, unknown>): Record<string, unknown> {
  if (typeof item.role === "string") return item;
  if (item.type === "function_call") return { role: "assistant", content: "", tool_calls: [{ function: { name: item.name, arguments: item.arguments } }] };
  if (item.type === "function_call_output") return { role: "tool", content: asText(item.output) };
  return { role: typeof item.type === "string" ? item.type : "item", content: JSON.stringify(item) };
}

/** A completions prompt: a string, a one-element array of strings, or token ids. */
export function renderCompletion(body: Record<string, unknown>): RenderedPrompt {
  let prompt: unknown = body.prompt;
  if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === "string" || Array.isArray(prompt[0]))) {
    prompt = prompt[0];
  }
  if (typeof prompt === "string") return { ok: true, text: prompt };
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every(isTokenId)) {
    return { ok: true, tokenIds: prompt };
  }
  const batched = Array.isArray(prompt) && prompt.length > 1 && prompt.every((p) => typeof p === "string" || Array.isArray(p));
  return {
    ok: false,
    message: batched
      ? "batched prompts are not supported by the simulator; send one prompt per request"
      : "prompt must be a string or an array of token ids",
    param: "prompt",
  };
}

export function isTokenId(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}
