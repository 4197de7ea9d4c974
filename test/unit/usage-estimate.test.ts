import { describe, expect, it } from "vitest";
import { answerChars, chargesEstimate, estimatedUsage, promptSize } from "../../src/tenants/estimate.ts";

describe("chargesEstimate", () => {
  const base = { counts: true, usage: false, began: true };

  it("charges an answer that began and was served or left, with no usage, for a key that counts tokens", () => {
    expect(chargesEstimate({ ...base, end: "served" })).toBe(true);
    expect(chargesEstimate({ ...base, end: "left" })).toBe(true);
  });

  it("charges nothing when the usage came, the answer never began, its backend failed it, or the key counts no tokens", () => {
    expect(chargesEstimate({ ...base, usage: true, end: "left" })).toBe(false);
    expect(chargesEstimate({ ...base, began: false, end: "left" })).toBe(false);
    expect(chargesEstimate({ ...base, end: "failed" })).toBe(false);
    expect(chargesEstimate({ ...base, counts: false, end: "served" })).toBe(false);
  });
});

describe("promptSize", () => {
  it("counts the characters of a chat's text, tool calls and tools included", () => {
    const body = { model: "m", messages: [{ role: "user", content: "hello" }, { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] }], max_tokens: 9 };
    expect(promptSize(body)).toEqual({ chars: "m".length + "user".length + "hello".length + "assistant".length + "c".length + "function".length + "f".length + "{}".length, tokens: 0 });
  });

  it("does not charge an image, audio or file by its bytes: a data URL or a base64 field counts nothing", () => {
    const image = `data:image/png;base64,${"A".repeat(200_000)}`;
    const body = {
      model: "m",
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "what is this" },
            { type: "image_url", image_url: { url: image, detail: "high" } },
            { type: "input_audio", input_audio: { data: "B".repeat(50_000), format: "wav" } },
            { type: "file", file: { file_data: "C".repeat(50_000), filename: "a.pdf" } },
          ],
        },
      ],
    };
    expect(promptSize(body).chars).toBeLessThan(100);
  });

  it("counts token ids given as numbers one token each: a completion's or an embedding's input", () => {
    expect(promptSize({ model: "m", prompt: [[1, 2, 3], [4, 5]], max_tokens: 16, temperature: 0.5 })).toEqual({ chars: 1, tokens: 5 });
    expect(promptSize({ model: "m", input: [7, 8, 9] })).toEqual({ chars: 1, tokens: 3 });
  });
});

describe("estimatedUsage", () => {
  it("prices the prompt's characters by the backend's characters per token, and an event as a completion token", () => {
    expect(estimatedUsage({ chars: 1000, tokens: 4, events: 17 }, 5)).toEqual({ prompt: 204, completion: 17, cached: 0 });
  });

  it("prices a whole answer's text by the same characters per token, as its completion", () => {
    expect(estimatedUsage({ chars: 1000, tokens: 0, events: 0, answerChars: 402 }, 4)).toEqual({ prompt: 250, completion: 101, cached: 0 });
    expect(estimatedUsage({ chars: 1, tokens: 0, events: 0, answerChars: -1 }, 4)).toBeNull();
  });

  it("charges nothing for figures no count could be", () => {
    expect(estimatedUsage({ chars: -1, tokens: 0, events: 1 }, 4)).toBeNull();
    expect(estimatedUsage({ chars: 1, tokens: 0.5, events: 1 }, 4)).toBeNull();
    expect(estimatedUsage({ chars: 1, tokens: 0, events: 1e308 }, 4)).toBeNull();
    expect(estimatedUsage({ chars: 1, tokens: 0, events: 1 }, 0)).toBeNull();
  });
});

describe("answerChars", () => {
  const bytes = (v: unknown) => new TextEncoder().encode(typeof v === "string" ? v : JSON.stringify(v)).buffer as ArrayBuffer;

  it("counts the text a chat answer, a completion and a Responses answer generated, and nothing else of the body", () => {
    const call = { id: "call_1", type: "function", function: { name: "get", arguments: '{"a":1}' } };
    // SGLang's nulls, vLLM's reasoning under both its names (counted once).
    const message = { role: "assistant", content: "hello", reasoning_content: "think", reasoning: "think", tool_calls: [call] };
    expect(answerChars(bytes({ id: "x", model: "m", choices: [{ index: 0, message, finish_reason: "stop" }, { message: { content: null, reasoning_content: null, reasoning: "r" } }] }))).toBe(5 + 5 + 7 + 1);
    expect(answerChars(bytes({ object: "text_completion", choices: [{ text: "abc" }, { text: "de" }] }))).toBe(5);
    const output = [
      { type: "reasoning", content: [{ type: "reasoning_text", text: "why" }] },
      { type: "message", content: [{ type: "output_text", text: "answer", annotations: [] }] },
      { type: "function_call", name: "f", arguments: "{}" },
    ];
    expect(answerChars(bytes({ object: "response", model: "m", instructions: "long instructions", output }))).toBe(3 + 6 + 2);
  });

  it("is 0 for a body that generated no text, or is no JSON", () => {
    expect(answerChars(bytes({ object: "list", data: [{ embedding: [0.1] }] }))).toBe(0);
    expect(answerChars(bytes("<html>"))).toBe(0);
    expect(answerChars(bytes("[1, 2]"))).toBe(0);
  });
});
