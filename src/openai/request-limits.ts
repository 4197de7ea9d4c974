import type { GatewayConfig } from "../config/schema.ts";
import { badRequest, type GatewayError } from "./errors.ts";

type Limits = GatewayConfig["limits"];

/**
 * The configured counts of a chat body, checked on the value JSON.parse returned, before the
 * schema walks it: the schema visits every item of an array, so an over-limit array is refused
 * for the price of reading its length. Anything of the wrong shape is left for the schema to name.
 * Order: messages, tools, then content parts and tool calls summed over the messages.
 */
export function chatLimitError(body: unknown, limits: Limits): GatewayError | null {
  if (!isRecord(body)) return null;
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const tools = body.tools;
  return (
    tooMany("messages", messages.length, limits.maxMessages) ??
    (Array.isArray(tools) ? tooMany("tools", tools.length, limits.maxTools) : null) ??
    summedOverMessages(messages, "content", "content parts", limits.maxContentParts) ??
    summedOverMessages(messages, "tool_calls", "tool calls", limits.maxToolCalls)
  );
}

function tooMany(field: string, count: number, limit: number): GatewayError | null {
  return count > limit ? badRequest(`${field} has ${count} items, more than the limit of ${limit}`, field) : null;
}

/** The array field `key` of every message, counted together; the error names the message where the sum passes the limit. */
function summedOverMessages(messages: unknown[], key: "content" | "tool_calls", what: string, limit: number): GatewayError | null {
  let sum = 0;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    const items = isRecord(m) ? m[key] : undefined;
    if (!Array.isArray(items)) continue;
    sum += items.length;
    if (sum > limit) {
      const param = `messages[${i}].${key}`;
      return badRequest(`messages hold more than ${limit} ${what} in all (the limit is passed at ${param})`, param);
    }
  }
  return null;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
