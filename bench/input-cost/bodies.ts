/**
 * The bodies bench:input sends: for each thing a body can hold many of, the most of it a request
 * may hold under kvgate's bounds (at a limit, filled to the 4 MiB body limit with text), and what
 * a client gets for going past it. Each body is written as text, so what it holds is exact.
 */
import { BODY_SHAPE } from "../../src/openai/body-shape.ts";
import { MAX_EXACT_VALUES } from "../../workers/gateway/body.ts";

export const MAX_BODY = 4 * 1024 * 1024;
/** A seed past 2^53, which a JavaScript number would round (2^64 − 1). */
const INEXACT_SEED = "18446744073709551615";
/** The default config's counts (src/config/schema.ts). */
const LIMITS = { maxMessages: 4096, maxTools: 1024, maxContentParts: 8192, maxToolCalls: 8192 };

export interface InputShape {
  name: string;
  /** What the body holds, for the report. */
  holds: string;
  path: "/v1/chat/completions" | "/v1/completions";
  text: string;
}

const chatHead = (model: string) => `{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[{"role":"user","content":"hi"}]`;

/** `head` + `count` items (as many as fit in 4 MiB when null), comma-separated, + `tail`. */
function repeat(head: string, item: string, tail: string, count: number | null = null): string {
  const n = count ?? Math.floor((MAX_BODY - head.length - tail.length + 1) / (item.length + 1));
  return head + Array.from({ length: n }, () => item).join(",") + tail;
}

/** Ends an unfinished chat body with a `pad` field of text that brings it to 4 MiB. */
function padded(unfinished: string): string {
  const room = MAX_BODY - unfinished.length - '"pad":""}'.length - 1;
  return `${unfinished},"pad":"${"x".repeat(Math.max(0, room))}"}`;
}

/** `n` distinct keys with 0 values, as object members. */
const keys = (n: number, prefix = "k") => Array.from({ length: n }, (_, i) => `"${prefix}${i}":0`).join(",");

export function inputShapes(model: string): InputShape[] {
  const chat = chatHead(model);
  const chatPath = "/v1/chat/completions" as const;
  // Objects, arrays and keys of the chat head (the body, model, max_tokens, messages, the array, a
  // message, role, content), and of a field "x" with its array, and of the pad.
  const headNodes = 8 + 2 + 1;
  // A message with keys enough that 4,096 of them reach the node bound: the message, its keys.
  const keysPerMessage = Math.floor((BODY_SHAPE.maxNodes - 5) / LIMITS.maxMessages) - 1;
  const keyedMessage = `{"role":"user",${keys(keysPerMessage - 1)}}`;
  const objectsAtLimit = Math.floor((BODY_SHAPE.maxNodes - headNodes) / (BODY_SHAPE.maxObjectKeys + 1));
  const nestedUnit = "[".repeat(BODY_SHAPE.maxDepth - 3) + "]".repeat(BODY_SHAPE.maxDepth - 3);
  const nestedUnits = Math.floor((BODY_SHAPE.maxNodes - headNodes) / (BODY_SHAPE.maxDepth - 3));
  const toolOfNodes = (nodes: number) => `{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{${Array.from({ length: nodes }, (_, i) => `"p${i}":{"type":"string"}`).join(",")}}}}}`;
  const toolCall = '{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}';
  const toolNodes = Math.floor((BODY_SHAPE.maxNodes - headNodes) / LIMITS.maxTools / 3) - 3;
  return [
    { name: "small", holds: "one short message (the everyday request)", path: chatPath, text: `${chat}}` },
    { name: "text", holds: "one 4 MiB message of plain text", path: chatPath, text: `{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[{"role":"user","content":"${"x".repeat(MAX_BODY - 100)}"}]}` },
    { name: "escaped-text", holds: "one message of 4 MiB of \\n and \\\" escapes", path: chatPath, text: `{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[{"role":"user","content":"${"\\n\\\"".repeat((MAX_BODY - 100) / 4)}"}]}` },
    { name: "empty-tools", holds: "a million empty tools (the issue's report)", path: chatPath, text: repeat(`${chat},"tools":[`, "{}", "]}") },
    { name: "tiny-messages", holds: "300,000 one-key messages", path: chatPath, text: repeat(`{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[`, '{"role":"u"}', "]}") },
    { name: "messages-over", holds: "4,097 messages of 1 KiB: one over maxMessages", path: chatPath, text: repeat(`{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[`, `{"role":"user","content":"${"m".repeat(990)}"}`, "]}", LIMITS.maxMessages + 1) },
    { name: "keyed-messages", holds: `4,096 messages of ${keysPerMessage} keys: every node the schema copies`, path: chatPath, text: padded(repeat(`{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[`, keyedMessage, "]", LIMITS.maxMessages)) },
    { name: "empty-objects", holds: "131,072 nodes as empty objects in a passed-through field", path: chatPath, text: padded(repeat(`${chat},"x":[`, "{}", "]", BODY_SHAPE.maxNodes - headNodes)) },
    { name: "nested-arrays", holds: "131,072 nodes as arrays 126 deep in a passed-through field", path: chatPath, text: padded(repeat(`${chat},"x":[`, nestedUnit, "]", nestedUnits)) },
    { name: "keyed-objects", holds: `${objectsAtLimit} objects of 1,024 keys in a passed-through field`, path: chatPath, text: padded(repeat(`${chat},"x":[`, `{${keys(BODY_SHAPE.maxObjectKeys)}}`, "]", objectsAtLimit)) },
    { name: "tool-schemas", holds: `1,024 tools of ${toolNodes} properties each`, path: chatPath, text: padded(repeat(`${chat},"tools":[`, toolOfNodes(toolNodes), "]", LIMITS.maxTools)) },
    { name: "content-parts", holds: "8,192 text parts in one message", path: chatPath, text: padded(repeat(`{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[{"role":"user","content":[`, '{"type":"text","text":"p"}', "]}]", LIMITS.maxContentParts)) },
    { name: "tool-calls", holds: "8,192 tool calls in one message", path: chatPath, text: padded(repeat(`${chat.slice(0, -1)},{"role":"assistant","content":null,"tool_calls":[`, toolCall, "]}]", LIMITS.maxToolCalls)) },
    { name: "numbers", holds: "2 million numbers in a passed-through field", path: chatPath, text: repeat(`${chat},"x":[`, "1", "]}") },
    { name: "token-ids", holds: "a prompt of 2 million token ids", path: "/v1/completions", text: repeat(`{"model":${JSON.stringify(model)},"max_tokens":1,"prompt":[`, "1", "]}") },
    // A number JavaScript cannot hold exactly is sent on as written: its field is parsed again keeping it (workers/gateway/body.ts).
    { name: "numbers-seed", holds: "2 million numbers in a passed-through field, and a seed past 2^53", path: chatPath, text: repeat(`${chat},"seed":${INEXACT_SEED},"x":[`, "1", "]}") },
    { name: "exact-at-bound", holds: `the same, and a passed-through field with a 1e400: with the seed, ${MAX_EXACT_VALUES} values parsed again, the most a body may have`, path: chatPath, text: repeat(`${chat},"seed":${INEXACT_SEED},"y":[${"1,".repeat(MAX_EXACT_VALUES - 3)}1e400],"x":[`, "1", "]}") },
    { name: "inexact-field", holds: "690,000 numbers past a double's range (1e999) in a passed-through field", path: chatPath, text: repeat(`${chat},"x":[`, "1e999", "]}") },
    { name: "prompt-batch", holds: "a batch of 1.4 million empty prompts", path: "/v1/completions", text: repeat(`{"model":${JSON.stringify(model)},"max_tokens":1,"prompt":[`, '""', "]}") },
  ];
}
