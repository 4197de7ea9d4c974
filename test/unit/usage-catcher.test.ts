import { describe, expect, it } from "vitest";
import { MarkedUsage, TopLevelUsage, USAGE_OBJECT_MAX_BYTES, type UsageCatcher } from "../../src/stream/usage-catcher.ts";

const encoder = new TextEncoder();

/** What `catcher` caught of `text` pushed `size` bytes at a time. */
function caught(catcher: () => UsageCatcher, text: string, size: number): string | null {
  const c = catcher();
  const bytes = encoder.encode(text);
  for (let at = 0; at < bytes.length; at += size) c.push(bytes.subarray(at, at + size));
  return c.caught();
}

const USAGE = '{"prompt_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}';

describe("MarkedUsage", () => {
  const body = JSON.stringify({
    choices: [{ message: { content: 'say "usage":{"prompt_tokens":1000} é 😀' }, logprobs: { content: [{ token: '"usage": {"a":1}', bytes: [34] }] } }],
    usage: JSON.parse(USAGE) as unknown,
    prompt_logprobs: [null, { "12": { decoded_token: "usage" } }, { '"usage"': 1 }],
  });

  it("catches the usage key's object whatever the chunking, and no escaped text that looks like one", () => {
    for (const size of [1, 2, 3, 7, 8, 64, 4096]) expect([size, caught(() => new MarkedUsage(), body, size)]).toEqual([size, USAGE]);
  });

  it("reads a body written with spaces, and lets go an object larger than a usage", () => {
    expect(caught(() => new MarkedUsage(), `{"usage" :\n {"prompt_tokens": 7}, "x": 1}`, 3)).toBe('{"prompt_tokens": 7}');
    const huge = `{"usage":{"x":"${"y".repeat(USAGE_OBJECT_MAX_BYTES)}"},"z":{"usage":{"prompt_tokens":1}}}`;
    expect(caught(() => new MarkedUsage(), huge, 100)).toBe('{"prompt_tokens":1}');
    expect(caught(() => new MarkedUsage(), `{"usage":{"prompt_tokens":1`, 5)).toBeNull();
  });
});

describe("TopLevelUsage", () => {
  const schema = { type: "object", properties: { usage: { input_tokens: 1000, output_tokens: 1000 } } };
  const body = JSON.stringify({
    id: "resp",
    metadata: { usage: "x", 'a\\"usage': "y" },
    instructions: 'he said "usage":{"input_tokens":1000} \\',
    output: [{ content: [{ text: '\\"usage\\":{} "' }] }, ["usage", { usage: { input_tokens: 9 } }]],
    usage: { input_tokens: 7, output_tokens: 2 },
    tools: [{ type: "function", name: "usage", parameters: schema }],
    user: "usage",
  });

  it("catches the body's own usage alone, however it is cut", () => {
    for (const size of [1, 2, 3, 5, 64, 4096]) expect([size, caught(() => new TopLevelUsage(), body, size)]).toEqual([size, '{"input_tokens":7,"output_tokens":2}']);
  });

  it("finds none where only the client's fields hold one, and a key that merely begins with usage is none", () => {
    const none = JSON.stringify({ tools: [{ parameters: schema }], usages: { input_tokens: 3 }, usage_x: { input_tokens: 4 }, text: { format: { schema } } });
    expect(caught(() => new TopLevelUsage(), none, 3)).toBeNull();
    expect(caught(() => new TopLevelUsage(), `{"a":"\\\\","usage" : {"input_tokens":5}}`, 1)).toBe('{"input_tokens":5}');
  });
});
