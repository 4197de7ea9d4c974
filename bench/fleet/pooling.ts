import { SCORE_SIDES } from "../../src/openai/requests.ts";
import { embed, relevance, truncate, type EmbeddingInput } from "./embedding-model.ts";
import { isRecord } from "./is-record.ts";
import { tokensForBytes } from "./prompt-blocks.ts";
import { isTokenId, renderChat } from "./prompt-render.ts";
import type { WorkerContext } from "./worker-context.ts";

/**
 * The endpoints that read a prompt and generate nothing — vLLM's pooling APIs: /v1/embeddings,
 * rerank and score. Their answers are one JSON body in vLLM's shapes; the work is one prefill of
 * every text they read, so they take one prefill step of that many tokens.
 */
export type PoolingEndpoint = "embeddings" | "rerank" | "score";

/** The answer's body and the prompt tokens it read, or the message of a 400. */
export type PoolingAnswer = { body: string; promptTokens: number } | string;

export function poolingAnswer(ctx: WorkerContext, endpoint: PoolingEndpoint, body: Record<string, unknown>): PoolingAnswer {
  switch (endpoint) {
    case "embeddings":
      return embeddings(ctx, body);
    case "rerank":
      return rerank(ctx, body);
    case "score":
      return score(ctx, body);
  }
}

const ENCODINGS = new Set(["float", "base64"]);

function embeddings(ctx: WorkerContext, body: Record<string, unknown>): PoolingAnswer {
  const inputs = body.input === undefined && body.messages !== undefined ? chatInput(body) : embeddingInputs(body.input);
  if (typeof inputs === "string") return inputs;
  const full = ctx.config.embeddingDimensions;
  const dimensions = body.dimensions ?? full;
  if (typeof dimensions !== "number" || !Number.isInteger(dimensions) || dimensions < 1 || dimensions > full) {
    return `dimensions must be an integer from 1 to ${full}, the model's embedding size`;
  }
  const encoding = body.encoding_format ?? "float";
  if (typeof encoding !== "string" || !ENCODINGS.has(encoding)) return 'encoding_format must be "float" or "base64"';
  let promptTokens = 0;
  const data: string[] = [];
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i] as EmbeddingInput;
    const tokens = tokensOf(input);
    const tooLong = contextError(ctx, tokens, `input[${i}]`);
    if (tooLong) return tooLong;
    promptTokens += tokens;
    const v = truncate(embed(input, full), dimensions);
    // base64: the vector's float32 bytes, little-endian, as OpenAI sends them.
    const embedding = encoding === "base64" ? `"${Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64")}"` : `[${v.join(",")}]`;
    data.push(`{"index":${i},"object":"embedding","embedding":${embedding}}`);
  }
  return {
    body: `${head(ctx, "embd", "list")},"data":[${data.join(",")}],"usage":${usage(promptTokens)}}`,
    promptTokens,
  };
}

/** vLLM's chat-style embeddings request: its messages, rendered as a chat template would, are one input. */
function chatInput(body: Record<string, unknown>): EmbeddingInput[] | string {
  const rendered = renderChat({ messages: body.messages });
  if (!rendered.ok) return rendered.message;
  return "text" in rendered ? [rendered.text] : [rendered.tokenIds];
}

/** A text, texts, token ids or lists of token ids, as a list of inputs; or the message of a 400. */
function embeddingInputs(input: unknown): EmbeddingInput[] | string {
  const inputs = Array.isArray(input) && input.length === 0 ? null : inputsOf(input);
  return inputs ?? "input must be a string, an array of strings, an array of token ids, or an array of such arrays";
}

/** A text, texts, token ids or lists of token ids (an embeddings input; a score side, as SGLang takes them), as a list of inputs; null for anything else. */
function inputsOf(value: unknown): EmbeddingInput[] | null {
  if (typeof value === "string") return [value];
  if (!Array.isArray(value)) return null;
  if (value.length > 0 && value.every(isTokenId)) return [value];
  return value.every((x) => typeof x === "string" || (Array.isArray(x) && x.every(isTokenId))) ? (value as EmbeddingInput[]) : null;
}

function rerank(ctx: WorkerContext, body: Record<string, unknown>): PoolingAnswer {
  const { query, documents } = body;
  if (typeof query !== "string") return "query must be a string (the simulator scores no multimodal input)";
  if (!isTexts(documents)) return "documents must be an array of strings (the simulator scores no multimodal input)";
  const topN = body.top_n ?? 0;
  if (typeof topN !== "number" || !Number.isInteger(topN) || topN < 0) return "top_n must be an integer of at least 0";
  const scored = scorePairs(ctx, [query], documents);
  if (typeof scored === "string") return scored;
  const results = scored.scores
    .map((relevance_score, index) => ({ index, relevance_score }))
    .sort((a, b) => b.relevance_score - a.relevance_score)
    .slice(0, topN === 0 ? documents.length : topN)
    .map((r) => `{"index":${r.index},"document":{"text":${JSON.stringify(documents[r.index])}},"relevance_score":${r.relevance_score}}`);
  return {
    body: `{"id":"rerank-${nextId(ctx)}","model":${ctx.modelJson},"usage":{"prompt_tokens":${scored.promptTokens},"total_tokens":${scored.promptTokens}},"results":[${results.join(",")}]}`,
    promptTokens: scored.promptTokens,
  };
}

function score(ctx: WorkerContext, body: Record<string, unknown>): PoolingAnswer {
  const pair = SCORE_SIDES.find(([one, two]) => body[one] !== undefined && body[two] !== undefined);
  if (!pair) return "text_1 and text_2 are required";
  const [one, two] = pair.map((side) => inputsOf(body[side]));
  if (!one || !two) return `${pair.join(" and ")} must each be a string, an array of strings, token ids or an array of such (the simulator scores no multimodal input)`;
  // vLLM pairs them 1:1, 1:N or N:N.
  if (one.length !== 1 && one.length !== two.length) return `${pair[0]} must hold one text or as many as ${pair[1]} (1:1, 1:N or N:N)`;
  const scored = scorePairs(ctx, one, two);
  if (typeof scored === "string") return scored;
  const data = scored.scores.map((s, index) => `{"index":${index},"object":"score","score":${s}}`);
  return {
    body: `${head(ctx, "score", "list")},"data":[${data.join(",")}],"usage":${usage(scored.promptTokens)}}`,
    promptTokens: scored.promptTokens,
  };
}

/** Each input of `seconds` scored against the first side's at its index (or its only one); a cross-encoder reads each pair whole. */
function scorePairs(ctx: WorkerContext, firsts: readonly EmbeddingInput[], seconds: readonly EmbeddingInput[]): { scores: number[]; promptTokens: number } | string {
  const dims = ctx.config.embeddingDimensions;
  const firstVectors = firsts.map((t) => embed(t, dims));
  const scores: number[] = [];
  let promptTokens = 0;
  for (let i = 0; i < seconds.length; i++) {
    const first = firsts.length === 1 ? 0 : i;
    const tokens = tokensOf(firsts[first] as EmbeddingInput) + tokensOf(seconds[i] as EmbeddingInput);
    const tooLong = contextError(ctx, tokens, `pair ${i}`);
    if (tooLong) return tooLong;
    promptTokens += tokens;
    scores.push(relevance(firstVectors[first] as Float32Array, embed(seconds[i] as EmbeddingInput, dims)));
  }
  return { scores, promptTokens };
}

function tokensOf(input: EmbeddingInput): number {
  // As for a prompt, at least one token (BOS).
  return Math.max(1, typeof input === "string" ? tokensForBytes(Buffer.byteLength(input)) : input.length);
}

function contextError(ctx: WorkerContext, tokens: number, what: string): string | null {
  const { maxModelLen } = ctx.config.profile;
  return tokens > maxModelLen ? `This model's maximum context length is ${maxModelLen} tokens. However, ${what} has ${tokens} tokens. Please reduce the length of the input.` : null;
}

function head(ctx: WorkerContext, idPrefix: string, object: string): string {
  return `{"id":"${idPrefix}-${nextId(ctx)}","object":"${object}","created":${Math.floor(Date.now() / 1000)},"model":${ctx.modelJson}`;
}

function nextId(ctx: WorkerContext): string {
  return `sim${ctx.config.index}-${(ctx.nextId++).toString(36)}`;
}

/** vLLM's usage of a pooling request: prompt tokens only. */
function usage(promptTokens: number): string {
  return `{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens},"completion_tokens":0,"prompt_tokens_details":null}`;
}

function isTexts(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((x) => typeof x === "string");
}
