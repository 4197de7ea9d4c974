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
  return turnsLimitError(body, "messages", "messages", limits);
}

/** The same counts of a Responses API body, whose `input` items stand where a chat's messages do. */
export function responsesLimitError(body: unknown, limits: Limits): GatewayError | null {
  return turnsLimitError(body, "input", "input items", limits);
}

/** The counts of a body whose field `list` holds the conversation's turns (`label` in messages). */
function turnsLimitError(body: unknown, list: string, label: string, limits: Limits): GatewayError | null {
  if (!isRecord(body)) return null;
  const value = body[list];
  const items = Array.isArray(value) ? value : [];
  const tools = body.tools;
  return (
    tooMany(list, items.length, limits.maxMessages) ??
    (Array.isArray(tools) ? tooMany("tools", tools.length, limits.maxTools) : null) ??
    summedOver(list, label, items, "content", "content parts", limits.maxContentParts) ??
    summedOver(list, label, items, "tool_calls", "tool calls", limits.maxToolCalls)
  );
}

function tooMany(field: string, count: number, limit: number): GatewayError | null {
  return count > limit ? badRequest(`${field} has ${count} items, more than the limit of ${limit}`, field) : null;
}

/**
 * The array field `key` of every item of the body's field `list` (called `label` in the message),
 * counted together; the error names the item where the sum passes the limit.
 */
function summedOver(list: string, label: string, items: unknown[], key: "content" | "tool_calls", what: string, limit: number): GatewayError | null {
  let sum = 0;
  for (let i = 0; i < items.length; i++) {
    const m = items[i];
    const parts = isRecord(m) ? m[key] : undefined;
    if (!Array.isArray(parts)) continue;
    sum += parts.length;
    if (sum > limit) {
      const param = `${list}[${i}].${key}`;
      return badRequest(`${label} hold more than ${limit} ${what} in all (the limit is passed at ${param})`, param);
    }
  }
  return null;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
