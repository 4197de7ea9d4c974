import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { restampHook } from "../../src/hooks/restamp.ts";
import type { HookContext } from "../../src/hooks/types.ts";
import { JsonFieldRewriter } from "../../src/stream/restamp.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const ctx: HookContext = { requestId: "r", group: "g", clientModel: "gpt-4o", upstreamModel: "meta-llama/Llama-3.1-8B", backendId: "b", stream: true, endpoint: "chat" };

function event(i: number, model = ctx.upstreamModel): string {
  return `data: {"id":"c${i}","object":"chat.completion.chunk","model":${JSON.stringify(model)},"choices":[{"index":0,"delta":{"content":"tok${i} "}}]}\n\n`;
}

function run(chunks: string[] | Uint8Array[]): string {
  const t = restampHook.onChunk?.(ctx);
  if (!t) throw new Error("restamp should transform");
  let out = "";
  for (const c of chunks) out += dec.decode(t.transform(typeof c === "string" ? enc.encode(c) : c), { stream: true });
  const rest = t.flush();
  if (rest) out += dec.decode(rest);
  return out;
}

describe("restamp hook", () => {
  const upstream = event(1) + event(2) + "data: [DONE]\n\n";
  const expected = upstream.replaceAll(`"model":"${ctx.upstreamModel}"`, `"model":"${ctx.clientModel}"`);

  it("rewrites every chunk's model to the name the client asked for", () => {
    expect(run([upstream])).toBe(expected);
    expect(expected).not.toContain(ctx.upstreamModel);
  });

  it("rewrites a chunk with more matches than a call takes arguments (the pieces are joined from a list)", () => {
    const many = `{"model":"${ctx.upstreamModel}"}`.repeat(200_000);
    expect(run([many])).toBe(`{"model":"${ctx.clientModel}"}`.repeat(200_000));
  });

  it("is correct wherever the pattern straddles a chunk boundary", () => {
    const bytes = enc.encode(upstream);
    for (let cut = 1; cut < bytes.length; cut++) {
      expect(run([bytes.subarray(0, cut), bytes.subarray(cut)])).toBe(expected);
    }
  });

  it("is correct when the body arrives one byte at a time", () => {
    const bytes = enc.encode(upstream);
    expect(run(Array.from(bytes, (_, i) => bytes.subarray(i, i + 1)))).toBe(expected);
  });

  it("passes a chunk without the field through as the same bytes, holding nothing back", () => {
    const t = new JsonFieldRewriter("model", "x", "y");
    const chunk = enc.encode('data: {"a":"b"}\n\n');
    expect(t.transform(chunk)).toBe(chunk);
    expect(t.flush()).toBeNull();
  });

  it("sends the key and whitespace on at once, holds back only a value that may be the one replaced, and flushes it at the end", () => {
    const t = new JsonFieldRewriter("model", "xyz", "y");
    expect(dec.decode(t.transform(enc.encode('{"id":1,"mod')))).toBe('{"id":1,"mod');
    expect(dec.decode(t.transform(enc.encode('el" :  ')))).toBe('el" :  ');
    expect(dec.decode(t.transform(enc.encode('"xy')))).toBe("");
    expect(dec.decode(t.flush() ?? new Uint8Array())).toBe('"xy');
  });

  it("leaves other models' names alone and does nothing when names already agree", () => {
    expect(run([event(1, "other-model")])).toBe(event(1, "other-model"));
    expect(restampHook.onChunk?.({ ...ctx, upstreamModel: ctx.clientModel })).toBeNull();
  });
});

/** The model field as a one-shot regex would rewrite it: any JSON whitespace around the colon. */
function reference(text: string, from = ctx.upstreamModel, to = ctx.clientModel): string {
  const value = JSON.stringify(from).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return text.replace(new RegExp(`("model"[ \\t\\r\\n]*:[ \\t\\r\\n]*)${value}`, "g"), (_m, head: string) => head + JSON.stringify(to));
}

describe("restamp hook, JSON whitespace", () => {
  const up = JSON.stringify(ctx.upstreamModel);
  const client = JSON.stringify(ctx.clientModel);
  it.each([
    ["no whitespace (vLLM)", `{"model":${up}}`, `{"model":${client}}`],
    ["a space after the colon (Python's json.dumps)", `{"model": ${up}}`, `{"model": ${client}}`],
    ["a space on both sides", `{"model" : ${up}}`, `{"model" : ${client}}`],
    ["a tab", `{"model":\t${up}}`, `{"model":\t${client}}`],
    ["CR LF and indentation (pretty-printed)", `{\r\n  "model":\r\n    ${up}\r\n}`, `{\r\n  "model":\r\n    ${client}\r\n}`],
    ["newlines before the colon", `{"model"\n\n:\n${up}}`, `{"model"\n\n:\n${client}}`],
    ["a long run of spaces", `{"model":${" ".repeat(300)}${up}}`, `{"model":${" ".repeat(300)}${client}}`],
    ["two fields in one event", `{"model": ${up},"x":{"model" :${up}}}`, `{"model": ${client},"x":{"model" :${client}}}`],
    ["another key ending in model", `{"base_model": ${up},"model_name": ${up}}`, `{"base_model": ${up},"model_name": ${up}}`],
    ["a name that only begins with the upstream's", `{"model": "${ctx.upstreamModel}-instruct"}`, `{"model": "${ctx.upstreamModel}-instruct"}`],
    ["a non-whitespace character between", `{"model": x ${up}}`, `{"model": x ${up}}`],
    ["JSON whitespace only: no-break space is not", `{"model":\u00a0${up}}`, `{"model":\u00a0${up}}`],
    ["the key as a value, then the field", `{"k":"model","model": ${up}}`, `{"k":"model","model": ${client}}`],
    ["a value that is itself a model key", `"model": "model": ${up}`, `"model": "model": ${client}`],
  ])("%s", (_name, input, output) => {
    expect(run([input])).toBe(output);
    expect(reference(input)).toBe(output);
  });

  it("is correct wherever a chunk boundary falls, whitespace included", () => {
    const text = `data: {"id":"a","model" :\r\n\t ${up},"choices":[]}\n\ndata: {"model":  ${up}}\n\n`;
    const bytes = enc.encode(text);
    for (let cut = 0; cut <= bytes.length; cut++) expect(run([bytes.subarray(0, cut), bytes.subarray(cut)])).toBe(reference(text));
    expect(run(Array.from(bytes, (_, i) => bytes.subarray(i, i + 1)))).toBe(reference(text));
  });

  it("matches a one-shot rewrite of the whole stream for generated streams, cut at every boundary", () => {
    // Fields and near-misses of them (another key, a missing colon, a name that differs at its end)
    // with any JSON whitespace between their parts, among loose pieces of JSON.
    const ws = fc.array(fc.constantFrom(" ", "\t", "\r", "\n"), { maxLength: 3 }).map((a) => a.join(""));
    const field = fc
      .tuple(fc.constantFrom('"model"', '"model"', '"mode"', '"model_name"'), ws, fc.constantFrom(":", ":", ""), ws, fc.constantFrom(up, up, client, up.slice(0, -1), `"${ctx.upstreamModel}x"`, '"model"'))
      .map((parts) => parts.join(""));
    const loose = fc.constantFrom('"model', "model", '"', ":", " ", "\n", ",", "{", "}", up, "\\", "\u00e9");
    const piece = fc.oneof(field, loose);
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 12 }), (pieces) => {
        const text = pieces.join("");
        const bytes = enc.encode(text);
        const expected = reference(text);
        for (let cut = 0; cut <= bytes.length; cut++) {
          if (run([bytes.subarray(0, cut), bytes.subarray(cut)]) !== expected) return false;
        }
        return run(Array.from(bytes, (_, i) => bytes.subarray(i, i + 1))) === expected;
      }),
      { numRuns: 400 },
    );
  });
});
