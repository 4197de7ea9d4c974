import { describe, expect, it } from "vitest";
import { StreamReply } from "../../bench/replay/stream-reply.ts";

const chunk = (delta: unknown, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ id: "c", object: "chat.completion.chunk", model: "m", choices: [{ index: 0, delta, finish_reason: null }], ...extra });

function read(events: (string | [string, string])[], collect = true): StreamReply {
  const reply = new StreamReply(collect);
  events.forEach((e, i) => (typeof e === "string" ? reply.onEvent("message", e, i) : reply.onEvent(e[0], e[1], i)));
  return reply;
}

describe("stream reply", () => {
  it("times the first non-empty content, joins the text, reads usage and [DONE]", () => {
    const reply = read([
      chunk({ role: "assistant", content: "" }),
      chunk({ content: "Hel" }),
      chunk({ content: 'lo "w\\orld"\n' }),
      chunk({ content: "✓" }),
      JSON.stringify({ id: "c", choices: [], usage: { prompt_tokens: 100, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 80 } } }),
      "[DONE]",
    ]);
    expect(reply.firstOutputAt).toBe(1);
    expect(reply.text).toBe('Hello "w\\orld"\n✓');
    expect(reply.usage).toEqual({ promptTokens: 100, cachedTokens: 80, completionTokens: 3 });
    expect(reply).toMatchObject({ done: true, error: null });
  });

  it("counts a tool call or completions text as the first output", () => {
    expect(read([chunk({ role: "assistant" }), chunk({ tool_calls: [{ index: 0, function: { name: "f" } }] })]).firstOutputAt).toBe(1);
    const text = read(['{"id":"x","choices":[{"index":0,"text":"","finish_reason":null}]}', '{"id":"x","choices":[{"index":0,"text":"hi","finish_reason":null}]}']);
    expect(text.firstOutputAt).toBe(1);
    expect(text.text).toBe("hi");
  });

  it("reads usage when it is sent on a content chunk, and none when it is absent", () => {
    const reply = read([chunk({ content: "a" }, { usage: { prompt_tokens: 5, completion_tokens: 1 } })], false);
    expect(reply.usage).toEqual({ promptTokens: 5, cachedTokens: null, completionTokens: 1 });
    expect(read([chunk({ content: "a" }), "[DONE]"]).usage).toBeNull();
  });

  it("keeps no text when not asked to", () => {
    const reply = read([chunk({ content: "a" }), chunk({ content: "b" })], false);
    expect(reply.text).toBe("");
    expect(reply.firstOutputAt).toBe(0);
  });

  it("records an error event, an error object in the data, and malformed data", () => {
    expect(read([chunk({ content: "a" }), ["error", '{"error":{"message":"upstream died"}}']]).error).toBe("error event: upstream died");
    expect(read(['{"error":{"message":"overloaded","code":503}}']).error).toBe("error in stream: overloaded");
    expect(read(['{"object":"error","message":"too long","type":"BadRequestError","code":400}']).error).toBe("error in stream: too long");
    expect(read(["{not json"]).error).toMatch(/^malformed event data/);
  });
});
