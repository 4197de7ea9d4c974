import { describe, expect, it } from "vitest";
import { CompletionRequestSchema } from "../../src/openai/requests.ts";
import { firstIssue } from "../../src/zod-issues.ts";

const parse = (prompt: unknown) => CompletionRequestSchema.safeParse({ model: "m", prompt });

describe("completions prompt", () => {
  it.each([["text"], [["a", "b"]], [[]], [[1, 2, 3]], [[[1, 2], [3]]], [[[]]]])("accepts %j as it is", (prompt) => {
    const r = parse(prompt);
    expect(r.success && r.data.prompt).toEqual(prompt);
  });

  it.each([[[1, "a"]], [["a", 1]], [[[1], "a"]], [[["a"]]], [[null]], [[true]], [[{}]], [[[1, "a"]]], [[[{}]]], [{}], [7], [null]])("refuses %j, naming prompt", (prompt) => {
    const r = parse(prompt);
    expect(r.success).toBe(false);
    if (!r.success) expect(firstIssue(r.error.issues)).toEqual({ param: "prompt", message: "prompt has an invalid type or shape" });
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
