import type { ResolvedGroup } from "../../src/config/load.ts";
import { badRequest, type GatewayError } from "../../src/openai/errors.ts";
import { chatLimitError } from "../../src/openai/request-limits.ts";
import { ChatCompletionRequestSchema, CompletionRequestSchema, type ChatCompletionRequest, type CompletionRequest } from "../../src/openai/requests.ts";
import { chatFingerprint, completionFingerprint } from "../../src/prefix/fingerprint.ts";
import { firstIssue } from "../../src/zod-issues.ts";
import type { LoadedConfig } from "../config.ts";

export type Endpoint = "chat" | "completions";

/** A request body checked once, at the edge, and how to fingerprint it for a group. */
export interface Validated {
  body: Record<string, unknown> & { model: string; stream?: boolean | null };
  chain: (g: ResolvedGroup) => number[];
}

export function validate(endpoint: Endpoint, raw: unknown, config: LoadedConfig): Validated {
  if (endpoint === "chat") {
    const overLimit = chatLimitError(raw, config.limits);
    if (overLimit) throw overLimit;
    const r = ChatCompletionRequestSchema.safeParse(raw);
    if (!r.success) throw issueError(r.error.issues);
    const body: ChatCompletionRequest = r.data;
    return { body, chain: (g) => chatFingerprint(body, { blockChars: g.blockChars, maxBlocks: g.maxPrefixBlocks }) };
  }
  const r = CompletionRequestSchema.safeParse(raw);
  if (!r.success) throw issueError(r.error.issues);
  const body: CompletionRequest = r.data;
  return { body, chain: (g) => completionFingerprint(body, { blockChars: g.blockChars, maxBlocks: g.maxPrefixBlocks }) };
}

function issueError(issues: Parameters<typeof firstIssue>[0]): GatewayError {
  const { param, message } = firstIssue(issues);
  return badRequest(message, param || null);
}

