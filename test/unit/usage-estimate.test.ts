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
    expect(promptSize(body, "chat")).toEqual({ chars: "m".length + "user".length + "hello".length + "assistant".length + "c".length + "function".length + "f".length + "{}".length, tokens: 0 });
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
    expect(promptSize(body, "chat").chars).toBeLessThan(100);
  });

  it("does not charge media at its place in a Responses input or a rerank's multimodal object: input_image, input_file, a tool output's image part", () => {
    const image = `data:image/png;base64,${"A".repeat(200_000)}`;
    const input = [
      { role: "user", content: [{ type: "input_text", text: "what is this" }, { type: "input_image", image_url: image, detail: "auto" }, { type: "input_file", file_data: "C".repeat(50_000), filename: "a.pdf" }] },
      { type: "function_call_output", call_id: "c", output: [{ type: "input_image", image_url: image }] },
    ];
    expect(promptSize({ model: "m", input }, "responses").chars).toBeLessThan(200);
    expect(promptSize({ model: "m", query: "which", documents: { content: [{ type: "image_url", image_url: { url: image } }] } }, "rerank").chars).toBeLessThan(100);
  });

  it("does not charge a tool's output given as one image part, not a list: a computer call's screenshot, a function's input_image (found by review: a 1 MB screenshot was ~275k tokens' text)", () => {
    const shot = `data:image/png;base64,${"iVBORw0KGgoAAAANSUhEUg".repeat(50_000)}`;
    for (const [type, output] of [
      ["computer_call_output", { type: "computer_screenshot", image_url: shot }],
      ["function_call_output", { type: "input_image", image_url: shot }],
    ] as const) {
      const input = [{ role: "user", content: "click the button" }, { type, call_id: "c1", output }];
      expect(promptSize({ model: "m", input }, "responses").chars, type).toBeLessThan(200);
    }
  });

  it("counts text as text wherever it sits, however it begins: as a message's content, a text part, a tool's output, under a tool schema's property named data (found by review: 40k characters after `data:,` were charged 3 tokens)", () => {
    const text = "The quarterly report says revenue grew. ".repeat(1000);
    const user = (content: unknown) => ({ model: "m", messages: [{ role: "user", content }] });
    const chats = {
      content: user(`data:,${text}`),
      textPart: user([{ type: "text", text: `data:text/plain,${text}` }]),
      toolSchema: { ...user("hi"), tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { data: { type: "string", description: text } } } } }] },
      fileData: { ...user("hi"), tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { file_data: { type: "string", description: text } } } } }] },
      imageUrlInSchema: { ...user("hi"), tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { image_url: { url: `data:,${text}` } } } } }] },
      toolCall: { model: "m", messages: [{ role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: `data:,${text}` } }] }] },
    };
    for (const [form, body] of Object.entries(chats)) expect(promptSize(body, "chat").chars, form).toBeGreaterThan(text.length);
    const output = { model: "m", input: [{ type: "function_call_output", call_id: "c", output: `data:,${text}` }] };
    expect(promptSize(output, "responses").chars).toBeGreaterThan(text.length);
    expect(promptSize({ model: "m", input: `data:,${text}` }, "embeddings").chars).toBeGreaterThan(text.length);
  });

  it("counts token ids given as numbers one token each: a completion's or an embedding's input", () => {
    expect(promptSize({ model: "m", prompt: [[1, 2, 3], [4, 5]], max_tokens: 16, temperature: 0.5 }, "completions")).toEqual({ chars: 1, tokens: 5 });
    expect(promptSize({ model: "m", input: [7, 8, 9] }, "embeddings")).toEqual({ chars: 1, tokens: 3 });
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
