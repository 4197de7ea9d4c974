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

export const CompletionRequestSchema = z.looseObject({
  ...samplingFields,
  prompt: z.union([z.string(), z.array(z.string()), z.array(z.number()), z.array(z.array(z.number()))]),
});

export type ChatMessage = z.infer<typeof ChatMessageSchema>;
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;
