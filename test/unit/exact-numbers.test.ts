import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isInexactNumber, scanBody } from "../../src/openai/body-shape.ts";
import { GatewayError } from "../../src/openai/errors.ts";
import { MAX_EXACT_VALUES, readSizedJsonBody, type ReadBody } from "../../workers/gateway/body.ts";

/**
 * A body holding a number JSON.parse would change is sent upstream as the client wrote it: the
 * top-level fields that hold one are parsed again keeping it (workers/gateway/body.ts), not the
 * whole body, and only up to a bound on such a field's values.
 */

const read = (text: string): Promise<ReadBody> => readSizedJsonBody(new Request("http://kvgate.test/", { method: "POST", body: text }), 8 * 1024 * 1024);

/** The body as the whole-text parse keeping every inexact number (as the gateway did before) serialises it: what the upstream must get. */
function reference(text: string): string {
  const exact = JSON.parse(text, (_k, v: unknown, context?: { source?: string }) =>
    typeof v === "number" && context?.source !== undefined && isInexactNumber(context.source) ? JSON.rawJSON(context.source) : v,
  ) as Record<string, unknown>;
  delete exact.__proto__;
  return JSON.stringify(exact);
}

const NUMBERS = ["1", "-0", "0.5", "1e20", "9007199254740991", "18446744073709551615", "-9223372036854775808", "1e400", "-1e999", "1E309"];
const space = fc.constantFrom("", " ", "\n  ");
const key = fc.constantFrom("seed", "x", "tools", "__proto__", "a\\u0062", "k\\\"q", "");
const valueText: fc.Arbitrary<string> = fc.letrec<{ value: string }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constantFrom(...NUMBERS, "true", "null", '"1e400"', '"s"'),
    fc.array(tie("value"), { maxLength: 4 }).map((items) => `[${items.join(",")}]`),
    fc.array(fc.tuple(key, tie("value")), { maxLength: 3 }).map((members) => `{${members.map(([k, v]) => `"${k}":${v}`).join(",")}}`),
  ),
})).value;
/** A body: an object of top-level fields, keys repeated at times, with space around the parts. */
const bodyText = fc
  .array(fc.tuple(key, valueText, space, space), { minLength: 1, maxLength: 6 })
  .map((members) => `{${members.map(([k, v, s1, s2]) => `${s1}"${k}"${s2}:${s1}${v}${s2}`).join(",")}}`);

describe("the body sent upstream with its inexact numbers as written", () => {
  it("is what parsing the whole text keeping them gives, for any body (keys given twice, nested, spaced, __proto__)", async () => {
    await fc.assert(
      fc.asyncProperty(bodyText, async (text) => {
        const r = await read(text);
        // Without one, the parsed body is sent, less its own __proto__ (validation drops it).
        const sent = { ...(r.exact ?? (r.json as Record<string, unknown>)) };
        delete sent.__proto__;
        expect(JSON.stringify(sent)).toBe(reference(text));
      }),
      { numRuns: 3000 },
    );
  });

  it("parses again only the fields that hold one: every other field is the parsed body's own value", async () => {
    const r = await read(`{"model":"m","x":[1,2,3],"seed":18446744073709551615,"tools":[{"maximum":1e400}],"y":{"z":[4]}}`);
    const json = r.json as Record<string, unknown>;
    expect(r.exact?.x).toBe(json.x);
    expect(r.exact?.y).toBe(json.y);
    expect(JSON.stringify(r.exact)).toBe(`{"model":"m","x":[1,2,3],"seed":18446744073709551615,"tools":[{"maximum":1e400}],"y":{"z":[4]}}`);
    expect(scanBody(`{"seed":1,"x":[1e400],"seed":18446744073709551615}`).inexactFields.map((f) => f.field)).toEqual(["x", "seed"]);
    // A key given again without one: its last value is the parsed body's, nothing to keep.
    expect(scanBody(`{"seed":18446744073709551615,"seed":1}`).inexactFields).toEqual([]);
  });

  it("refuses one past the values it parses again, counted over every such field of the body: a 400 naming the field that passes; at the bound, kept", async () => {
    const items = (n: number) => Array.from({ length: n }, () => "1").join(",");
    // The array itself counts as a value, as do its items.
    const atBound = await read(`{"model":"m","x":[${items(MAX_EXACT_VALUES - 2)},1e400]}`);
    expect(JSON.stringify(atBound.exact).endsWith(",1e400]}")).toBe(true);
    const over = await read(`{"model":"m","x":[${items(MAX_EXACT_VALUES - 1)},1e400]}`).catch((e: unknown) => e);
    expect(over).toBeInstanceOf(GatewayError);
    expect(over).toMatchObject({ status: 400, code: "json_too_complex", param: "x" });
    // Values nested in objects count the same.
    const objects = Array.from({ length: MAX_EXACT_VALUES / 2 }, () => `{"a":1}`).join(",");
    const nested = await read(`{"model":"m","tools":[${objects},{"max":1e400}]}`).catch((e: unknown) => e);
    expect(nested).toMatchObject({ status: 400, code: "json_too_complex", param: "tools" });
    // Spread over fields, each well within the bound: the field whose values pass the total is named.
    const fields = (n: number, each: number) => Array.from({ length: n }, (_, i) => `"f${i}":[${items(each - 2)},1e400]`).join(",");
    const quarter = MAX_EXACT_VALUES / 4;
    const fourQuarters = await read(`{"model":"m",${fields(4, quarter)}}`);
    expect(Object.keys(fourQuarters.exact ?? {})).toEqual(["model", "f0", "f1", "f2", "f3"]);
    const spread = await read(`{"model":"m",${fields(4, quarter)},"seed":18446744073709551615}`).catch((e: unknown) => e);
    expect(spread).toMatchObject({ status: 400, code: "json_too_complex", param: "seed" });
  });

  it("keeps one in an ordinary long tools list: 1,024 tools of ten int64 parameters, one bound past 2^63", async () => {
    const parameter = (max: string) => `{"type":"integer","description":"a count","format":"int64","minimum":0,"maximum":${max}}`;
    const tool = (i: number) =>
      `{"type":"function","function":{"name":"f${i}","description":"does f","parameters":{"type":"object","properties":{${Array.from({ length: 10 }, (_, p) => `"p${p}":${parameter(i === 0 && p === 0 ? "9223372036854775807" : "100")}`).join(",")}},"required":["p0"]}}}`;
    const r = await read(`{"model":"m","tools":[${Array.from({ length: 1_024 }, (_, i) => tool(i)).join(",")}]}`);
    expect(JSON.stringify(r.exact)).toContain(`"maximum":9223372036854775807`);
  });
});

/**
 * The text scanBody is given, counting the characters it examines through the string's methods:
 * the pass is linear when the count stays within a few times the text's length, on any text.
 */
function countingText(text: string): { text: string; examined: () => number } {
  let examined = 0;
  const counted = {
    length: text.length,
    charCodeAt: (i: number) => (examined++, text.charCodeAt(i)),
    indexOf: (s: string, from = 0) => {
      const at = text.indexOf(s, from);
      examined += (at < 0 ? text.length : at + 1) - from;
      return at;
    },
    lastIndexOf: (s: string, from = text.length - 1) => {
      const at = text.lastIndexOf(s, from);
      examined += from + 1 - (at < 0 ? 0 : at);
      return at;
    },
    slice: (start: number, end?: number) => {
      const part = text.slice(start, end);
      examined += part.length;
      return part;
    },
  };
  return { text: counted as unknown as string, examined: () => examined };
}

describe("the pass finding them, on text that is not JSON", () => {
  const pad = " ".repeat(100_000);
  it.each([
    ["one object of keys without commas after a run of spaces", `{${pad}${'"a":0 '.repeat(1_000)}}`],
    ["many top-level objects after a run of spaces", `${pad}${'{"":0}'.repeat(5_000)}`],
    ["one key read by many colons after a run of spaces", `{${pad}"a"${":".repeat(1_000)}}`],
    ["many top-level objects holding an inexact number", Array.from({ length: 5_000 }, (_, i) => `{"a${i}":1e400}`).join(",")],
  ])("examines each character a bounded number of times: %s", (_what, body) => {
    const { text, examined } = countingText(body);
    scanBody(text);
    expect(examined() / body.length).toBeLessThan(3);
  });

  it("tracks the fields of the first top-level value only: JSON.parse refuses a second", () => {
    const body = Array.from({ length: 5_000 }, (_, i) => `{"a${i}":1e400}`).join("");
    expect(scanBody(body).inexactFields.map((f) => f.field)).toEqual(["a0"]);
  });
});
