import type { ChatCompletionRequest, ChatMessage, CompletionRequest, ResponseInputItem, ResponsesRequest } from "../openai/requests.ts";
import { BlockHasher } from "./block-hasher.ts";
import { itemJson, MEDIA_CHARS, NO_MEDIA, partJson, type MediaSize } from "./media.ts";

export interface FingerprintOptions {
  blockChars: number;
  maxBlocks: number;
}

// Control characters, which no client text holds as hashed (`written`), so "user: x" in a
// message body never hashes like a user turn.
const ROLE_OPEN = "\u0001";
const ROLE_CLOSE = "\u0002";
const ESCAPE = "\u0003";
const WRITTEN_OUT = /[\u0001-\u0003]/g;

/**
 * What a client wrote, as hashed: the delimiters and the escape each become the escape and a
 * letter. A client may send control characters, and a message whose text spelled
 * \u0001user\u0002… hashed as the turns it spells: one prompt then matched another's blocks, at
 * another depth of the chain than its own. Text without them (any real prompt) is itself.
 */
function written(text: string): string {
  if (text.indexOf(ROLE_OPEN) < 0 && text.indexOf(ROLE_CLOSE) < 0 && text.indexOf(ESCAPE) < 0) return text;
  return text.replace(WRITTEN_OUT, (c) => ESCAPE + String.fromCharCode(0x40 + c.charCodeAt(0)));
}

/**
 * Canonical prompt of a chat request, hashed as it streams: tools first (a template renders
 * them ahead of the conversation), then each message role-tagged, a block boundary after each.
 * Reading stops where the chain is full: past maxBlocks nothing is serialised or joined, so a
 * request's fingerprint costs at most maxBlocks × blockChars characters of work, whatever its size.
 */
export function chatFingerprint(body: ChatCompletionRequest, opts: FingerprintOptions): number[] {
  const h = new BlockHasher(opts.blockChars, opts.maxBlocks);
  pushTools(h, body.tools);
  for (const message of body.messages) {
    if (h.full) break;
    pushMessage(h, message);
    h.boundary();
  }
  return h.hashes;
}

/**
 * Canonical prompt of a Responses API request, read the way chat's is: tools, `instructions` as a
 * system message, then `input` — a string as a user message, each item as a message (one with a
 * role) or as its JSON tagged with its type (a function call, its output, ...), a block boundary
 * after each. So a conversation continued by sending its items back keeps its earlier hashes, and
 * the same conversation sent as chat messages hashes alike.
 */
export function responsesFingerprint(body: ResponsesRequest, opts: FingerprintOptions): number[] {
  const h = new BlockHasher(opts.blockChars, opts.maxBlocks);
  pushTools(h, body.tools);
  if (body.instructions) {
    pushTurn(h, "system", undefined, body.instructions);
    h.boundary();
  }
  const input = body.input;
  if (typeof input === "string") {
    pushTurn(h, "user", undefined, input);
    h.boundary();
    return h.hashes;
  }
  for (const item of input) {
    if (h.full) break;
    pushItem(h, item);
    h.boundary();
  }
  return h.hashes;
}

/** Tools come first: a template renders them ahead of the conversation. */
function pushTools(h: BlockHasher, tools: readonly object[] | null | undefined): void {
  if (!tools || tools.length === 0) return;
  h.push(`${ROLE_OPEN}tools${ROLE_CLOSE}`);
  pushJsonArray(h, tools);
  h.boundary();
}

/** A null field hashes as one left out: SGLang's answer sent back with `tool_calls: null` is the same prompt. */
function pushMessage(h: BlockHasher, m: ChatMessage): void {
  pushTurn(h, m.role, m.name, m.content);
  if (m.tool_calls && !h.full) pushJsonArray(h, m.tool_calls);
  if (m.tool_call_id) h.push(written(m.tool_call_id));
}

/**
 * A role-tagged turn and its text: a string, or each part's text (a plain string part is its text;
 * another part, typed or not, its JSON, with a stand-in of a fixed size for each image, audio or
 * file sent inline: src/prefix/media.ts).
 */
function pushTurn(h: BlockHasher, role: string, name: string | null | undefined, content: ChatMessage["content"]): void {
  h.push(ROLE_OPEN + written(role) + (name ? `:${written(name)}` : "") + ROLE_CLOSE);
  if (typeof content === "string") h.push(written(content));
  else if (Array.isArray(content)) {
    for (const part of content) {
      if (h.full) return;
      if (typeof part === "string") {
        h.push(written(part));
        continue;
      }
      const t = part as Record<string, unknown>;
      if (typeof t.text === "string") h.push(written(t.text));
      else h.push(partJson(part));
    }
  }
}

function pushItem(h: BlockHasher, item: ResponseInputItem): void {
  if (item.role !== undefined) pushTurn(h, item.role, undefined, item.content);
  else {
    h.push(ROLE_OPEN + written(item.type ?? "") + ROLE_CLOSE);
    h.push(itemJson(item));
  }
}

/** The text JSON.stringify(items) would give, one item at a time, up to where the chain is full. */
function pushJsonArray(h: BlockHasher, items: readonly object[]): void {
  h.push("[");
  for (let i = 0; i < items.length && !h.full; i++) h.push((i > 0 ? "," : "") + JSON.stringify(items[i]));
  h.push("]");
}

/**
 * Canonical prompt of a completions request; of a batch, the first prompt stands for it. A request
 * of vLLM's prompt_embeds alone has no text: its chain is empty, and it is routed as embeddings are.
 */
export function completionFingerprint(body: CompletionRequest, opts: FingerprintOptions): number[] {
  const h = new BlockHasher(opts.blockChars, opts.maxBlocks);
  const p = body.prompt;
  const first: unknown = Array.isArray(p) ? p[0] : p;
  if (typeof first === "string") h.push(written(first));
  else if (typeof first === "number") pushTokenIds(h, p as number[]);
  else if (Array.isArray(first)) pushTokenIds(h, first as number[]);
  h.boundary();
  return h.hashes;
}

/** The text ids.join(",") would give, up to where the chain is full. */
function pushTokenIds(h: BlockHasher, ids: readonly number[]): void {
  for (let i = 0; i < ids.length && !h.full; i++) h.push(i > 0 ? `,${ids[i]}` : String(ids[i]));
}

/**
 * Whether a completions prompt is a batch: more than one text or token-id list, of which the chain
 * hashes the first alone (an OpenAI batch, `[p1, …, p1000]`, or `[[ids…], …]`).
 */
export function isPromptBatch(body: CompletionRequest): boolean {
  const p = body.prompt;
  return Array.isArray(p) && p.length > 1 && typeof p[0] !== "number";
}

/**
 * Whether a Responses request goes on from a stored response (`previous_response_id`): an engine
 * that stores responses prefills that conversation and then the input, of which the chain hashes
 * the input alone.
 */
export function isFollowUp(body: ResponsesRequest): boolean {
  return typeof body.previous_response_id === "string";
}

/**
 * Characters of prompt text a chat's template renders that the chain does not read: vLLM's
 * `documents` (Command-R's and Granite's RAG templates render them), the values of
 * `chat_template_kwargs`, a message's `reasoning` or `reasoning_content` (interleaved-thinking
 * templates render an assistant's). Counted, not hashed: 1.2 MB of documents beside "hi" was one
 * block, ahead of every 2k-token prompt on a priority engine. The strings' lengths, so a megabyte
 * costs a walk of the few values that hold it; the body's depth is bounded (src/openai/body-shape.ts).
 */
export function unreadChars(body: ChatCompletionRequest): number {
  let chars = textChars(body.documents) + textChars(body.chat_template_kwargs);
  for (const m of body.messages) chars += textChars(m.reasoning_content) + textChars(m.reasoning);
  return chars;
}

function textChars(value: unknown): number {
  if (typeof value === "string") return value.length;
  if (typeof value !== "object" || value === null) return 0;
  let chars = 0;
  for (const v of Object.values(value)) chars += textChars(v);
  return chars;
}

/**
 * The prompt's size in blocks: its chain's length, or — when the chain stands for part of the
 * prompt — its body's bytes over blockChars. What a backend will prefill for it is the whole
 * prompt, not the hashed head: a 120k-token prompt counted as its first 32k tokens made its
 * backend look idle while it prefilled for seconds, and a batch of a thousand prompts counted as
 * its first did so too. The chain stands for part of it when it was cut at maxBlocks, or when it is
 * `partial`: a batch's first prompt (isPromptBatch), a follow-up's input (isFollowUp). A partial
 * one is at least a block more than its chain, however small its body: the other prompts, the stored
 * conversation, are prompt work too (that its usage teaches nothing, the Worker says: RouteCall.partial). Bytes, not characters, so it
 * overcounts: the JSON around the text a little, text outside ASCII up to 3× (6× when a client
 * escapes it as \uXXXX). Only such a prompt pays it, and it costs nothing to read; counting a long
 * prompt's characters would walk it. Its `media` (mediaOf) count MEDIA_CHARS each, not as their
 * bytes (base64 is no measure of what a VLM spends on an image) nor as a URL's characters, which the chain hashes;
 * `unread` (unreadChars), text the chain leaves out, counts to a whole chain as it does to bytes.
 */
export function promptBlocks(chain: readonly number[], bodyBytes: number, opts: FingerprintOptions, partial = false, media: MediaSize = NO_MEDIA, unread = 0): number {
  const whole = chain.length < opts.maxBlocks && !partial;
  if (whole) return chain.length + Math.floor((media.unhashed + unread) / opts.blockChars);
  const chars = bodyBytes - media.chars + media.count * MEDIA_CHARS;
  return Math.max(partial ? chain.length + 1 : chain.length, Math.floor(chars / opts.blockChars));
}
