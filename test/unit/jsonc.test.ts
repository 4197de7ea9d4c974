import { describe, expect, it } from "vitest";
import { parseJsonc } from "../../src/config/jsonc.ts";

function value(text: string): unknown {
  const r = parseJsonc(text);
  if (!r.ok) throw new Error(r.error);
  return r.value;
}

describe("a config written by hand (JSONC)", () => {
  it("takes line and block comments and trailing commas, as the README's example has them", () => {
    const text = `{
      // the groups
      "modelGroups": [
        { "name": "a", /* inline */ "aliases": ["b", "c",], },   // trailing commas
        /* a block
           over lines */
      ],
    }`;
    expect(value(text)).toEqual({ modelGroups: [{ name: "a", aliases: ["b", "c"] }] });
  });

  it("leaves strings alone: slashes, stars, commas before brackets and escaped quotes are text", () => {
    const text = `{"url": "http://10.0.0.1:8000/v1", "glob": "/* not a comment */", "list": ",]", "q": "say \\"hi\\", // ok", "bs": "\\\\"}`;
    expect(value(text)).toEqual({ url: "http://10.0.0.1:8000/v1", glob: "/* not a comment */", list: ",]", q: 'say "hi", // ok', bs: "\\" });
  });

  it("is plain JSON when there is nothing to strip", () => {
    expect(value('{"a":[1,2,{"b":null}]}')).toEqual({ a: [1, 2, { b: null }] });
  });

  it("keeps JSON's error positions pointing into the text as written", () => {
    const r = parseJsonc('{\n  // a comment\n  "a": 1 2\n}');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(/line 3 column 10/);
  });

  it("takes one leading byte order mark, keeping error positions; a second one is an error", () => {
    expect(value('\ufeff{"a": 1}')).toEqual({ a: 1 });
    const r = parseJsonc('\ufeff{\n  "a": 1 2\n}');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(/line 2 column 10/);
    expect(parseJsonc('\ufeff\ufeff{"a": 1}').ok).toBe(false);
  });

  it("says where a block comment that never ends began", () => {
    expect(parseJsonc('{\n"a": 1\n/* oops\n}')).toEqual({ ok: false, error: "unterminated /* comment at line 3" });
  });

  it("does not take a comma that is the whole content, or two commas, as trailing", () => {
    expect(parseJsonc("[,]").ok).toBe(false);
    expect(parseJsonc("[1,,]").ok).toBe(false);
  });
});
