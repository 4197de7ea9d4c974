import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BODY_SHAPE, isInexactNumber, scanBody, shapeExcess, type ShapeBounds } from "../../src/openai/body-shape.ts";
import { referenceShapeExcess } from "../support/json-shape-reference.ts";

const tight: ShapeBounds = { maxDepth: 3, maxNodes: 8, maxObjectKeys: 2 };
const nest = (levels: number) => "[".repeat(levels) + "]".repeat(levels);

describe("body shape, counted on the text before parsing", () => {
  it.each([
    ["a flat body", '{"model":"m","messages":[{"role":"user"}]}', null],
    ["3 levels", `{"x":${nest(2)}}`, null],
    ["4 levels, named by its top-level field", `{"a":1,"x":${nest(3)}}`, { rule: "depth", field: "x" }],
    ["4 levels under a top-level array", `[${nest(3)}]`, { rule: "depth", field: null }],
    ["8 nodes (objects, arrays and keys)", '{"a":[{},{}],"b":[[]]}', null],
    ["9 nodes: the 9th is inside b", '{"a":[{},{}],"b":[[],[]]}', { rule: "nodes", field: "b" }],
    ["9 nodes: the 9th is a key inside b", '{"a":[{},{},{}],"b":{"c":0}}', { rule: "nodes", field: "b" }],
    ["9 nodes: the 9th is a key of the body's own object", '{"a":[{},{},{},{},{}],"b":0}', { rule: "nodes", field: null }],
    ["2 keys in an object", '{"x":[{"a":1,"b":2}]}', null],
    ["3 keys in an object, named by its top-level field", '{"x":[{"a":1,"b":2,"c":3}]}', { rule: "object-keys", field: "x" }],
    ["3 keys in the body's own object", '{"a":1,"b":2,"c":3}', { rule: "object-keys", field: null }],
    ["brackets, colons and escaped quotes inside strings count for nothing", '{"x":"[[[[{{{{:::\\"[[[[","y":"\\\\"}', null],
    ["a key with escapes is named as it decodes", `{"t\\u00e9\\"st":${nest(3)}}`, { rule: "depth", field: 't\u00e9"st' }],
    // Strings are read a character at a time for 32 characters, then searched: escapes on both sides of that edge.
    ...[30, 31, 32, 33, 64].map((n) => [`an escaped quote after ${n} characters of a string`, `{"x":"${"a".repeat(n)}\\"[[[[[","y":"${"b".repeat(n)}\\\\"}`, null] as const),
    ["text that is not JSON still gets an answer", '{"a":]]]]:::"unterminated [[[[', null],
    ["the depth is checked before the count at the same bracket", nest(9), { rule: "depth", field: null }],
  ] as const)("%s", (_name, text, expected) => {
    expect(shapeExcess(text, tight)).toEqual(expected);
    expect(referenceShapeExcess(text, tight)).toEqual(expected);
  });

  it("applies the gateway's bounds by default", () => {
    expect(BODY_SHAPE).toEqual({ maxDepth: 128, maxNodes: 131_072, maxObjectKeys: 1_024 });
    expect(shapeExcess(`{"x":${nest(127)}}`)).toBeNull();
    expect(shapeExcess(`{"x":${nest(128)}}`)).toEqual({ rule: "depth", field: "x" });
    // The body's object, its key "x", the array, and n - 3 objects in it: n nodes.
    const objects = (n: number) => `{"x":[${Array.from({ length: n - 3 }, () => "{}").join(",")}]}`;
    expect(shapeExcess(objects(BODY_SHAPE.maxNodes))).toBeNull();
    expect(shapeExcess(objects(BODY_SHAPE.maxNodes + 1))).toEqual({ rule: "nodes", field: "x" });
    const keys = (n: number) => `{"x":{${Array.from({ length: n }, (_, i) => `"k${i}":0`).join(",")}}}`;
    expect(shapeExcess(keys(BODY_SHAPE.maxObjectKeys))).toBeNull();
    expect(shapeExcess(keys(BODY_SHAPE.maxObjectKeys + 1))).toEqual({ rule: "object-keys", field: "x" });
  });

  it("agrees with the plain one-character-at-a-time reading on JSON and on any mix of its tokens", () => {
    // Strings long enough to be read past the stretch the scan reads a character at a time, with
    // escaped quotes and runs of backslashes on either side of it, some never closed.
    const stringy = fc
      .tuple(fc.array(fc.constantFrom("x", "xxxxxxxx", "\\", '\\"', "\\\\", "[", ":", "\u00e9"), { maxLength: 24 }), fc.boolean())
      .map(([parts, closed]) => `"${parts.join("")}${closed ? '"' : ""}`);
    const token = fc.oneof(fc.constantFrom("{", "}", "[", "]", ":", ",", '"', "\\", '\\"', '"k"', '"k":', '"\\\\"', "1", " ", "\u00e9", "\u{1f600}"), stringy);
    const text = fc.oneof(
      fc.array(token, { maxLength: 60 }).map((ts) => ts.join("")),
      fc.jsonValue({ maxDepth: 5 }).map((v) => JSON.stringify(v)),
      fc.tuple(fc.jsonValue({ maxDepth: 5 }).map((v) => JSON.stringify(v)), fc.nat()).map(([t, cut]) => t.slice(0, cut % (t.length + 1))),
    );
    const bounds = fc.record({ maxDepth: fc.integer({ min: 1, max: 6 }), maxNodes: fc.integer({ min: 1, max: 30 }), maxObjectKeys: fc.integer({ min: 1, max: 4 }) });
    fc.assert(
      fc.property(text, bounds, (t, b) => {
        expect(shapeExcess(t, b)).toEqual(referenceShapeExcess(t, b));
      }),
      { numRuns: 2000 },
    );
  });
});

describe("numbers JSON.parse would change, found in the same pass", () => {
  it.each([
    ["an int64 seed", '{"seed":9223372036854775807}', true],
    ["a negative integer past 2^53", '{"x":[-18446744073709551615]}', true],
    ["past a double's range", '{"x":1e400}', true],
    ["2^53 itself", '{"x":9007199254740992}', true],
    ["the largest safe integer", '{"x":9007199254740991}', false],
    ["a long fraction: every reader takes the nearest double", '{"x":0.30000000000000000444089209850062616169452667236328125}', false],
    ["an exponent within range", '{"x":1e20,"y":-2.5E-300}', false],
    ["digits inside a string", '{"content":"9223372036854775807 1e400"}', false],
    ["ordinary sampling fields", '{"max_tokens":64,"temperature":0.7,"top_p":1,"n":-1}', false],
  ] as const)("%s", (_name, text, inexact) => {
    expect(scanBody(text).inexactNumbers).toBe(inexact);
  });

  it("each number is checked with its value, not its length alone", () => {
    expect(isInexactNumber("12345678901234567")).toBe(true);
    expect(isInexactNumber("1234567890123456")).toBe(false);
    expect(isInexactNumber("-0")).toBe(false);
    expect(isInexactNumber("1E309")).toBe(true);
  });
});

describe("a fraction longer than a double's largest value written", () => {
  it("is checked too: 400 digits before the point are past a double's range", () => {
    expect(scanBody(`{"x":${"9".repeat(400)}.5}`).inexactNumbers).toBe(true);
    expect(scanBody(`{"x":0.${"1".repeat(300)}}`).inexactNumbers).toBe(false);
  });
});
