import { describe, expect, it } from "vitest";
import { CompletionRequestSchema, EmbeddingRequestSchema, RerankRequestSchema, ResponsesRequestSchema, SCORE_SIDES, ScoreRequestSchema } from "../../src/openai/requests.ts";
import { firstIssue } from "../../src/zod-issues.ts";

const parse = (prompt: unknown) => CompletionRequestSchema.safeParse({ model: "m", prompt });

describe("completions prompt", () => {
  it.each([["text"], [["a", "b"]], [[]], [[1, 2, 3]], [[[1, 2], [3]]], [[[]]]])("accepts %j as it is", (prompt) => {
    const r = parse(prompt);
    expect(r.success && r.data.prompt).toEqual(prompt);
  });

  it.each([[[1, "a"]], [["a", 1]], [[[1], "a"]], [[["a"]]], [[null]], [[true]], [[{}]], [[[1, "a"]]], [[[{}]]], [{}], [7], [[100, 1.00001]], [[[-1]]], [[2 ** 53]]])("refuses %j, naming prompt", (prompt) => {
    const r = parse(prompt);
    expect(r.success).toBe(false);
    if (!r.success) expect(firstIssue(r.error.issues)).toEqual({ param: "prompt", message: "prompt has an invalid type or shape" });
  });

  it("takes none, or null, beside vLLM's prompt_embeds; without them it is required", () => {
    for (const prompt of [null, undefined]) {
      expect(CompletionRequestSchema.safeParse({ model: "m", prompt, prompt_embeds: "AAAA" }).success).toBe(true);
      const r = parse(prompt);
      expect(r.success ? null : firstIssue(r.error.issues)).toEqual({ param: "prompt", message: "prompt is required" });
    }
  });

  it("checks a long array against each option in one pass: one issue per option, never one per item", () => {
    const ids: unknown[] = Array.from({ length: 100_000 }, (_, i) => i);
    ids.push("not an id");
    const r = parse(ids);
    expect(r.success).toBe(false);
    const issue = r.success ? null : r.error.issues[0];
    // One issue per option of the union: text, texts, token ids (the item that is not one), lists of ids.
    expect(issue?.code).toBe("invalid_union");
    if (issue?.code === "invalid_union") expect(issue.errors.map((e) => e.length)).toEqual([1, 1, 1, 1]);
  });
});

const issue = (r: { success: boolean; error?: { issues: Parameters<typeof firstIssue>[0] } }) => (r.success || !r.error ? null : firstIssue(r.error.issues));

describe("embeddings request", () => {
  it.each([["text"], [["a", "b"]], [[1, 2]], [[[1], [2, 3]]]])("accepts input %j", (input) => {
    expect(EmbeddingRequestSchema.safeParse({ model: "m", input }).success).toBe(true);
  });

  it("accepts vLLM's chat-style messages in place of input", () => {
    expect(EmbeddingRequestSchema.safeParse({ model: "m", messages: [{ role: "user", content: "x" }] }).success).toBe(true);
  });

  it.each([
    [{ model: "m" }, { param: "input", message: "input is required" }],
    [{ input: "x" }, { param: "model", message: "model is required" }],
    [{ model: "m", input: [{}] }, { param: "input", message: "input has an invalid type or shape" }],
    [{ model: "m", input: "x", stream: true }, { param: "stream", message: "stream must be false" }],
    [{ model: "m", input: "x", dimensions: 0 }, { param: "dimensions", message: "dimensions must be >= 1" }],
  ])("refuses %j", (body, expected) => {
    expect(issue(EmbeddingRequestSchema.safeParse(body))).toEqual(expected);
  });
});

describe("responses request", () => {
  it("accepts text, or items that are messages or typed items, and passes unknown fields through", () => {
    const items = [{ role: "user", content: [{ type: "input_text", text: "x" }] }, { type: "function_call_output", call_id: "c", output: "y" }];
    for (const input of ["x", items]) {
      const r = ResponsesRequestSchema.safeParse({ model: "m", input, instructions: null, reasoning: { effort: "low" } });
      expect(r.success && r.data).toMatchObject({ input, reasoning: { effort: "low" } });
    }
    for (const previous_response_id of ["resp_1", null]) expect(ResponsesRequestSchema.safeParse({ model: "m", input: "x", previous_response_id }).success).toBe(true);
  });

  it.each([
    [{ model: "m" }, { param: "input", message: "input is required" }],
    [{ model: "m", input: [{ role: "user", content: "x" }, { content: "y" }] }, { param: "input[1]", message: "input[1] must have a type or a role" }],
    // A union (text or items) names only itself when neither option fits.
    [{ model: "m", input: [{ role: "user", content: 7 }] }, { param: "input", message: "input has an invalid type or shape" }],
    [{ model: "m", input: "x", instructions: 7 }, { param: "instructions", message: "instructions must be a string" }],
    // No engine stores a response under "": each backend would answer it with a 404 naming no parameter.
    [{ model: "m", input: "x", previous_response_id: "" }, { param: "previous_response_id", message: "previous_response_id must have at least 1 character(s)" }],
    [{ model: "m", input: "x", previous_response_id: 7 }, { param: "previous_response_id", message: "previous_response_id must be a string" }],
    // Its type only: a -1 (llama.cpp's "no limit") is the server's to judge.
    [{ model: "m", input: "x", max_output_tokens: 1.5 }, { param: "max_output_tokens", message: "max_output_tokens must be an integer" }],
  ])("refuses %j", (body, expected) => {
    expect(issue(ResponsesRequestSchema.safeParse(body))).toEqual(expected);
  });
});

describe("rerank and score requests", () => {
  it("rerank: a query and documents, as text or vLLM's multimodal objects", () => {
    expect(RerankRequestSchema.safeParse({ model: "m", query: "q", documents: ["a", "b"], top_n: 1 }).success).toBe(true);
    expect(RerankRequestSchema.safeParse({ model: "m", query: { content: [] }, documents: { content: [] } }).success).toBe(true);
    expect(issue(RerankRequestSchema.safeParse({ model: "m", query: "q", documents: [1] }))).toEqual({ param: "documents", message: "documents has an invalid type or shape" });
    expect(issue(RerankRequestSchema.safeParse({ model: "m", documents: ["a"] }))).toEqual({ param: "query", message: "query is required" });
  });

  it.each(SCORE_SIDES)("score: takes its two sides as %s and %s", (one, two) => {
    expect(ScoreRequestSchema.safeParse({ model: "m", [one]: "q", [two]: ["a", "b"] }).success).toBe(true);
  });

  it("score: refuses one side alone, or a side of numbers", () => {
    expect(issue(ScoreRequestSchema.safeParse({ model: "m", text_1: "q", documents: ["a"] }))).toEqual({
      param: "text_1",
      message: "text_1 and text_2 are required (or queries and documents, queries and items, data_1 and data_2, query and items)",
    });
    // vLLM's sides are text or its multimodal object: numbers are the gateway's 400, not the engine's.
    expect(issue(ScoreRequestSchema.safeParse({ model: "m", text_1: "q", text_2: [1] }))).toEqual({ param: "text_2", message: "text_2 has an invalid type or shape" });
  });

  it("score: takes SGLang's token ids, a query of ids and items of id lists, as SGLang does, and no other nesting", () => {
    expect(ScoreRequestSchema.safeParse({ model: "m", query: [1, 2], items: [[3], [4]] }).success).toBe(true);
    expect(ScoreRequestSchema.safeParse({ model: "m", query: [1, 2], items: [] }).success).toBe(true);
    expect(issue(ScoreRequestSchema.safeParse({ model: "m", query: [[1]], items: [[3]] }))).toEqual({ param: "query", message: "query has an invalid type or shape" });
    expect(issue(ScoreRequestSchema.safeParse({ model: "m", query: [1], items: [3, 4] }))).toEqual({ param: "items", message: "items has an invalid type or shape" });
    expect(issue(ScoreRequestSchema.safeParse({ model: "m", query: [1.5], items: [[3]] }))).toEqual({ param: "query", message: "query has an invalid type or shape" });
  });
});
