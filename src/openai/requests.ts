import * as z from "zod/mini";

/**
 * Request bodies, validated once at the edge. Objects are loose: fields the gateway does not
 * know (top_k, min_p, chat_template_kwargs, ...) pass through to the upstream untouched.
 * Only what the gateway reads or the upstream would choke on is checked.
 */

const text = z.string();
const contentPart = z.looseObject({ type: z.string() });
const content = z.nullable(z.union([text, z.array(contentPart)]));

export const ChatMessageSchema = z.looseObject({
  role: z.string().check(z.minLength(1)),
  content: z.optional(content),
  name: z.optional(z.string()),
  tool_calls: z.optional(z.array(z.looseObject({}))),
  tool_call_id: z.optional(z.string()),
});

const tokenCount = z.optional(z.nullable(z.number().check(z.int(), z.minimum(0))));
const samplingFields = {
  model: z.string().check(z.minLength(1)),
  stream: z.optional(z.nullable(z.boolean())),
  stream_options: z.optional(z.nullable(z.looseObject({ include_usage: z.optional(z.nullable(z.boolean())) }))),
  max_tokens: tokenCount,
  n: z.optional(z.nullable(z.number().check(z.int(), z.minimum(1), z.maximum(128)))),
  temperature: z.optional(z.nullable(z.number().check(z.minimum(0), z.maximum(2)))),
  top_p: z.optional(z.nullable(z.number().check(z.minimum(0), z.maximum(1)))),
};

export const ChatCompletionRequestSchema = z.looseObject({
  ...samplingFields,
  messages: z.array(ChatMessageSchema).check(z.minLength(1)),
  max_completion_tokens: tokenCount,
  tools: z.optional(z.nullable(z.array(z.looseObject({})))),
});

/**
 * An array whose items all pass `is`, checked in one loop. The schema of an array allocates a
 * result for every item, and as an option of a union it reports every item that fails: for a
 * prompt of a million token ids that costs more than parsing them.
 */
function arrayOf<T>(is: (v: unknown) => v is T) {
  return z.custom<T[]>((v) => Array.isArray(v) && everyItem(v, is), { abort: true });
}

function everyItem<T>(items: unknown[], is: (v: unknown) => v is T): items is T[] {
  for (let i = 0; i < items.length; i++) if (!is(items[i])) return false;
  return true;
}

const isText = (v: unknown): v is string => typeof v === "string";
// JSON numbers past ±1.7e308 parse to Infinity, which z.number() refuses too.
const isTokenId = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isTokenIds = (v: unknown): v is number[] => Array.isArray(v) && everyItem(v, isTokenId);

export const CompletionRequestSchema = z.looseObject({
  ...samplingFields,
  /** Text, a batch of texts, token ids, or a batch of token-id lists. */
  prompt: z.union([z.string(), arrayOf(isText), arrayOf(isTokenId), arrayOf(isTokenIds)]),
});

export type ChatMessage = z.infer<typeof ChatMessageSchema>;
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;
