import type { ResolvedGroup } from "../../src/config/load.ts";
import { engineSteeringRefusal } from "../../src/openai/engine-steering.ts";
import { badRequest, type GatewayError } from "../../src/openai/errors.ts";
import { contentPartRefusal } from "../../src/openai/content-parts.ts";
import { chatLimitError, responsesLimitError } from "../../src/openai/request-limits.ts";
import { ChatCompletionRequestSchema, CompletionRequestSchema, EmbeddingRequestSchema, RerankRequestSchema, ResponsesRequestSchema, ScoreRequestSchema } from "../../src/openai/requests.ts";
import { chatFingerprint, completionFingerprint, isFollowUp, isPromptBatch, promptBlocks, responsesFingerprint, unreadChars, type FingerprintOptions } from "../../src/prefix/fingerprint.ts";
import { cacheSaltOf, saltedChain } from "../../src/prefix/cache-salt.ts";
import { mediaOf, NO_MEDIA, type MediaSize } from "../../src/prefix/media.ts";
import { firstIssue } from "../../src/zod-issues.ts";
import type { LoadedConfig } from "../config.ts";

/** What a request asks for; attempt.ts names the upstream path of each. */
import type { Endpoint } from "../../src/openai/endpoints.ts";

export type { Endpoint };

/**
 * The prompt as a group routes it: its block hashes, its size in blocks (more than the hashes when
 * they were cut), whether it holds media (an image, audio, a file: src/prefix/media.ts), each
 * counted as a fixed number of blocks, so that its blocks measure none of its tokens, and whether
 * its usage counts more than its chain reads (RouteCall.partial).
 */
export interface Prompt {
  chain: number[];
  blocks: number;
  media?: boolean;
  partial?: boolean;
}

/** A request body checked once, at the edge, and how to fingerprint it for a group. */
export interface Validated {
  body: Record<string, unknown> & { model: string; stream?: boolean | null };
  prompt: (g: ResolvedGroup) => Prompt;
}

/**
 * `bodyBytes`: the body's size as it came, what a prompt's size is estimated from past its hashed
 * head. `owner`: the caller owns the deployment (the master key), and may set what steers its
 * engines (src/openai/engine-steering.ts) and have them fetch media from any host
 * (src/openai/content-parts.ts); a virtual key may not, and its body is read for neither.
 */
export function validate(endpoint: Endpoint, raw: unknown, config: LoadedConfig, bodyBytes: number, owner: boolean): Validated {
  const v = validBody(endpoint, raw, config, bodyBytes);
  const refused = owner ? null : (engineSteeringRefusal(v.body) ?? contentPartRefusal(endpoint, v.body));
  if (refused) throw refused;
  return v;
}

function validBody(endpoint: Endpoint, raw: unknown, config: LoadedConfig, bodyBytes: number): Validated {
  switch (endpoint) {
    case "chat":
      return checked(raw, config, bodyBytes, ChatCompletionRequestSchema, chatFingerprint, chatLimitError, undefined, (b) => mediaOf(b.messages), unreadChars);
    case "completions":
      return checked(raw, config, bodyBytes, CompletionRequestSchema, completionFingerprint, undefined, isPromptBatch);
    case "responses":
      return checked(raw, config, bodyBytes, ResponsesRequestSchema, responsesFingerprint, responsesLimitError, isFollowUp, (b) => mediaOf(b.input));
    case "embeddings":
      // vLLM's chat-style `messages` are counted as a chat's are.
      return checked(raw, config, bodyBytes, EmbeddingRequestSchema, noPrompt, chatLimitError);
    case "rerank":
      return checked(raw, config, bodyBytes, RerankRequestSchema, noPrompt);
    case "score":
      return checked(raw, config, bodyBytes, ScoreRequestSchema, noPrompt);
  }
}

type Issues = Parameters<typeof firstIssue>[0];

interface Schema<B> {
  safeParse(raw: unknown): { success: true; data: B } | { success: false; error: { issues: Issues } };
}

/**
 * The body, parsed: first its configured counts (`overLimit`, read off the parsed JSON before the
 * schema walks it), then the schema; the first issue is the 400. Fingerprinted per group when routed;
 * `partial`: whether the body's chain hashes only part of its prompt (a completions batch's first
 * prompt, a Responses follow-up's input: src/prefix/fingerprint.ts promptBlocks);
 * `mediaIn`: the media of its prompt, read once; `unreadIn`: the characters of text its template
 * renders that the chain does not read (unreadChars), read once.
 */
function checked<B extends Validated["body"]>(
  raw: unknown,
  config: LoadedConfig,
  bodyBytes: number,
  schema: Schema<B>,
  fingerprint: (body: B, o: FingerprintOptions) => number[],
  overLimit?: (raw: unknown, limits: LoadedConfig["limits"]) => GatewayError | null,
  partial?: (body: B) => boolean,
  mediaIn?: (body: B) => MediaSize,
  unreadIn?: (body: B) => number,
): Validated {
  const excess = overLimit?.(raw, config.limits);
  if (excess) throw excess;
  const r = schema.safeParse(raw);
  if (!r.success) throw issueError(r.error.issues);
  const body = r.data;
  const salt = cacheSaltOf(body);
  const media = mediaIn?.(body) ?? NO_MEDIA;
  const unread = unreadIn?.(body) ?? 0;
  return {
    body,
    prompt: (g) => {
      const opts = { blockChars: g.blockChars, maxBlocks: g.maxPrefixBlocks };
      const chain = salt === null ? fingerprint(body, opts) : saltedChain(fingerprint(body, opts), salt);
      const part = partial?.(body) === true;
      // Unread text counts as its size does (promptBlocks): less than a block adds none.
      return { chain, blocks: promptBlocks(chain, bodyBytes, opts, part, media, unread), media: media.count > 0, partial: part || unread >= g.blockChars };
    },
  };
}

/** No prompt whose cache a backend could hold: the group's object picks the least-loaded backend. */
const noPrompt = (): number[] => [];

function issueError(issues: Issues): GatewayError {
  const { param, message } = firstIssue(issues);
  return badRequest(message, param || null);
}
