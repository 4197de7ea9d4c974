import * as z from "zod/mini";

/**
 * Request bodies, validated once at the edge. Objects are loose: fields the gateway does not
 * know (top_k, min_p, chat_template_kwargs, ...) pass through to the upstream untouched.
 * Only what the gateway reads or the upstream would choke on is checked.
 */

const text = z.string();
// No `type` is vLLM's "simple" part: a bare {"image_url": "https://…"} (audio_url, video_url alike),
// or a plain string, which vLLM takes as a text part.
const contentPart = z.union([text, z.looseObject({ type: z.optional(z.string()) })]);
const content = z.nullable(z.union([text, z.array(contentPart)]));

// Null where a field is optional, as vLLM and SGLang take it: SGLang answers `"tool_calls": null`,
// and a client sends that message back as the next turn's history.
export const ChatMessageSchema = z.looseObject({
  role: z.string().check(z.minLength(1)),
  content: z.optional(content),
  name: z.optional(z.nullable(z.string())),
  tool_calls: z.optional(z.nullable(z.array(z.looseObject({})))),
  tool_call_id: z.optional(z.nullable(z.string())),
});

// The gateway reads none of these values (a key's tpm and cost count the usage an answer reports),
// so their ranges are the server's to judge: vLLM takes a temperature over 2 and n over 128,
// llama.cpp a max_tokens of -1 for "no limit". Their types are checked, so a string is the
// gateway's 400 naming the field rather than a backend's.
const integer = z.optional(z.nullable(z.number().check(z.int())));
const real = z.optional(z.nullable(z.number()));
const samplingFields = {
  model: z.string().check(z.minLength(1)),
  stream: z.optional(z.nullable(z.boolean())),
  stream_options: z.optional(z.nullable(z.looseObject({ include_usage: z.optional(z.nullable(z.boolean())) }))),
  max_tokens: integer,
  n: integer,
  temperature: real,
  top_p: real,
};

export const ChatCompletionRequestSchema = z.looseObject({
  ...samplingFields,
  messages: z.array(ChatMessageSchema).check(z.minLength(1)),
  max_completion_tokens: integer,
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
// A token id is a vocabulary index: a 1.00001 or a -1 would pass the gateway only for the server to refuse it.
const isTokenId = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
const isTokenIds = (v: unknown): v is number[] => Array.isArray(v) && everyItem(v, isTokenId);

/** Text, a batch of texts, token ids, or a batch of token-id lists: a completions prompt, an embeddings input. */
const textsOrTokens = z.union([z.string(), arrayOf(isText), arrayOf(isTokenId), arrayOf(isTokenIds)]);

const given = (v: unknown): boolean => v !== undefined && v !== null;

/**
 * A completions request: a prompt, or vLLM's `prompt_embeds` (base64 tensors, passed on unread) in
 * its place, the prompt then null or left out as vLLM takes it.
 */
export const CompletionRequestSchema = z
  .looseObject({
    ...samplingFields,
    prompt: z.optional(z.nullable(textsOrTokens)),
  })
  .check(z.refine((b) => given(b.prompt) || given(b.prompt_embeds), { error: "is required", path: ["prompt"] }));

const model = samplingFields.model;
/** An answer that is one JSON body: a client asking for a stream is told so, not sent a body it cannot read. */
const notStreamed = z.optional(z.nullable(z.literal(false)));

/** POST /v1/embeddings: OpenAI's `input`, or vLLM's chat-style `messages`. */
export const EmbeddingRequestSchema = z
  .looseObject({
    model,
    stream: notStreamed,
    input: z.optional(textsOrTokens),
    messages: z.optional(z.array(ChatMessageSchema).check(z.minLength(1))),
    dimensions: z.optional(z.nullable(z.number().check(z.int(), z.minimum(1)))),
  })
  .check(z.refine((b) => b.input !== undefined || b.messages !== undefined, { error: "is required", path: ["input"] }));

/**
 * An item of a Responses API `input`: a message (a role and its content, as a chat message has)
 * or another item named by its `type` (function_call, function_call_output, reasoning, ...).
 */
export const ResponseInputItemSchema = z
  .looseObject({ type: z.optional(z.string()), role: z.optional(z.string().check(z.minLength(1))), content: z.optional(content) })
  .check(z.refine((item) => item.type !== undefined || item.role !== undefined, "must have a type or a role"));

/**
 * A background response is kept by the backend that made it, to be fetched, cancelled or listed
 * later by its id: the gateway serves none of those calls, and could not route one, not knowing
 * which backend stored the response (as with previous_response_id).
 */
const noBackground = z.optional(
  z.nullable(
    z.boolean().check(
      z.refine(
        (b) => !b,
        "is not supported: a background response is fetched later by its id (GET /v1/responses/{id}), which the gateway does not serve and could not route, not knowing which backend stored it; stream the response instead",
      ),
    ),
  ),
);

/** POST /v1/responses. */
export const ResponsesRequestSchema = z.looseObject({
  model,
  stream: samplingFields.stream,
  background: noBackground,
  input: z.union([text, z.array(ResponseInputItemSchema)]),
  instructions: z.optional(z.nullable(text)),
  // No engine stores a response under "": every backend would answer 404 naming none, read as an
  // endpoint the group does not serve (src/upstream/answer.ts), after each was tried.
  previous_response_id: z.optional(z.nullable(z.string().check(z.minLength(1)))),
  tools: z.optional(z.nullable(z.array(z.looseObject({})))),
  max_output_tokens: integer,
  temperature: samplingFields.temperature,
  top_p: samplingFields.top_p,
});

/** vLLM's and Cohere's rerank (POST /rerank, /v1/rerank, /v2/rerank): text, or vLLM's multimodal object. */
export const RerankRequestSchema = z.looseObject({
  model,
  stream: notStreamed,
  query: z.union([text, z.looseObject({})]),
  documents: z.union([arrayOf(isText), z.looseObject({})]),
  top_n: z.optional(z.nullable(z.number().check(z.int(), z.minimum(0)))),
});

/** One side of a score request: a text, a list of texts, or vLLM's multimodal object. */
const scoreSide = z.union([text, arrayOf(isText), z.looseObject({})]);
/**
 * SGLang's sides (its ScoringRequest) may be token ids too, for a client that tokenises its query
 * once and scores many items: the query one list of ids, the items a list of them. The other sides
 * take no numbers (vLLM's are text or its multimodal object) and stay the gateway's 400; items of ids
 * beside vLLM's `queries` are vLLM's own 400.
 */
const scoreQuery = z.union([text, arrayOf(isText), z.looseObject({}), arrayOf(isTokenId)]);
const scoreItems = z.union([text, arrayOf(isText), z.looseObject({}), arrayOf(isTokenIds)]);
/** The pairs of fields a score request names its two sides with: vLLM's (text_1 and text_2 first), then SGLang's. */
export const SCORE_SIDES = [
  ["text_1", "text_2"],
  ["queries", "documents"],
  ["queries", "items"],
  ["data_1", "data_2"],
  ["query", "items"],
] as const;

/** vLLM's score (POST /score, /v1/score): two sides, scored pairwise; SGLang's /v1/score names them query and items. */
export const ScoreRequestSchema = z
  .looseObject({
    model,
    stream: notStreamed,
    text_1: z.optional(scoreSide),
    text_2: z.optional(scoreSide),
    queries: z.optional(scoreSide),
    query: z.optional(scoreQuery),
    documents: z.optional(scoreSide),
    items: z.optional(scoreItems),
    data_1: z.optional(scoreSide),
    data_2: z.optional(scoreSide),
  })
  .check(
    z.refine((b) => SCORE_SIDES.some(([one, two]) => b[one] !== undefined && b[two] !== undefined), {
      // Read after the field's name: "text_1 and text_2 are required (...)".
      error: "and text_2 are required (or queries and documents, queries and items, data_1 and data_2, query and items)",
      path: ["text_1"],
    }),
  );

export type ChatMessage = z.infer<typeof ChatMessageSchema>;
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;
export type ResponseInputItem = z.infer<typeof ResponseInputItemSchema>;
export type ResponsesRequest = z.infer<typeof ResponsesRequestSchema>;
