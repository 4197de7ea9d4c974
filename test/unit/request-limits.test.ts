import { describe, expect, it } from "vitest";
import { chatLimitError, responsesLimitError } from "../../src/openai/request-limits.ts";

const limits = { maxBodyBytes: 1 << 20, maxMessages: 4, maxTools: 3, maxContentParts: 5, maxToolCalls: 2 };
const user = { role: "user", content: "hi" };
const many = <T>(n: number, item: T): T[] => Array.from({ length: n }, () => item);

function verdict(body: unknown): { param: string | null; message: string } | null {
  const e = chatLimitError(body, limits);
  return e && { param: e.param, message: e.message };
}

describe("request limits, counted before the schema", () => {
  it.each([
    ["messages at the limit", { messages: many(4, user) }, null],
    ["one message over", { messages: many(5, user) }, { param: "messages", message: "messages has 5 items, more than the limit of 4" }],
    ["tools at the limit", { messages: [user], tools: many(3, {}) }, null],
    ["one tool over", { messages: [user], tools: many(4, {}) }, { param: "tools", message: "tools has 4 items, more than the limit of 3" }],
    ["tools over with messages that are no array", { messages: "x", tools: many(4, {}) }, { param: "tools", message: "tools has 4 items, more than the limit of 3" }],
    ["content parts summed over messages, at the limit", { messages: [{ role: "user", content: many(2, {}) }, { role: "user", content: many(3, {}) }] }, null],
    [
      "content parts summed over messages, passing the limit in the second",
      { messages: [{ role: "user", content: many(2, {}) }, user, { role: "user", content: many(4, {}) }] },
      { param: "messages[2].content", message: "messages hold more than 5 content parts in all (the limit is passed at messages[2].content)" },
    ],
    [
      "tool calls summed over messages",
      { messages: [{ role: "assistant", tool_calls: [{}] }, { role: "assistant", tool_calls: many(2, {}) }] },
      { param: "messages[1].tool_calls", message: "messages hold more than 2 tool calls in all (the limit is passed at messages[1].tool_calls)" },
    ],
    ["the message count first", { messages: many(5, { role: "user", content: many(9, {}) }), tools: many(9, {}) }, { param: "messages", message: "messages has 5 items, more than the limit of 4" }],
    ["tools before what the messages hold", { messages: [{ role: "user", content: many(9, {}) }], tools: many(9, {}) }, { param: "tools", message: "tools has 9 items, more than the limit of 3" }],
    // Shapes the schema rejects are left to it, so its error names them.
    ["a body that is no object", many(9, user), null],
    ["messages that are not objects", { messages: [1, "x", null, [many(9, {})]] }, null],
    ["content that is no array", { messages: [{ role: "user", content: { length: 99 } }] }, null],
  ])("%s", (_name, body, expected) => {
    expect(verdict(body)).toEqual(expected);
  });

  it("refuses an over-limit array by its length alone, never reading its items", () => {
    // Items that throw when read: the check that refuses these arrays must not touch them, and
    // neither can the schema, which runs only after it.
    const untouchable = new Proxy([], {
      get: (t, k) => {
        if (k === "length") return 1_000_000;
        if (typeof k === "string" && /^\d+$/.test(k)) expect.unreachable(`read item ${k}`);
        return Reflect.get(t, k);
      },
    });
    expect(verdict({ messages: untouchable })?.param).toBe("messages");
    expect(verdict({ messages: [user], tools: untouchable })?.param).toBe("tools");
  });
});

describe("request limits of a Responses API body: its input items count as a chat's messages do", () => {
  const item = { role: "user", content: [{ type: "input_text", text: "hi" }] };
  it.each([
    ["items at the limit", { input: many(4, item) }, null],
    ["one item over limits.maxMessages", { input: many(5, item) }, { param: "input", message: "input has 5 items, more than the limit of 4" }],
    ["an input that is text", { input: "x".repeat(1000) }, null],
    ["one tool over", { input: [item], tools: many(4, {}) }, { param: "tools", message: "tools has 4 items, more than the limit of 3" }],
    [
      "content parts summed over the items",
      { input: [item, { type: "function_call_output", output: "x" }, { role: "user", content: many(5, {}) }] },
      { param: "input[2].content", message: "input items hold more than 5 content parts in all (the limit is passed at input[2].content)" },
    ],
  ])("%s", (_name, body, expected) => {
    const e = responsesLimitError(body, limits);
    expect(e && { param: e.param, message: e.message }).toEqual(expected);
  });
});
