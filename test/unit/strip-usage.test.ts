import { describe, expect, it } from "vitest";
import { hasUsageObject, UsageEventStripper } from "../../src/stream/strip-usage.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

const role = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":null}\n\n';
const token = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":null}\n\n';
const usage = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\n';
const done = "data: [DONE]\n\n";

function run(pieces: string[]): string {
  const s = new UsageEventStripper();
  let out = "";
  for (const p of pieces) out += dec.decode(s.transform(enc.encode(p)));
  const rest = s.flush();
  return out + (rest ? dec.decode(rest) : "");
}

describe("taking out the usage event the client did not ask for", () => {
  it("drops only the choices-empty usage event, wherever the chunks are cut", () => {
    const whole = role + token + usage + done;
    expect(run([whole])).toBe(role + token + done);
    // Cut at every byte: the same result.
    for (let cut = 1; cut < whole.length; cut += 7) expect(run([whole.slice(0, cut), whole.slice(cut)])).toBe(role + token + done);
  });

  it("leaves a chunk with usage and choices (continuous usage stats) and every usage:null", () => {
    const both = 'data: {"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\n';
    expect(run([role, both, done])).toBe(role + both + done);
  });

  it("finds a usage object with any JSON whitespace, and not a null one", () => {
    expect(hasUsageObject(enc.encode('{"usage" :\n {"prompt_tokens":1}}'))).toBe(true);
    expect(hasUsageObject(enc.encode('{"usage":null}'))).toBe(false);
    expect(hasUsageObject(enc.encode('{"content":"usage: {"}'))).toBe(false);
  });
});
