import { describe, expect, it } from "vitest";
import { restampHook } from "../../src/hooks/restamp.ts";
import type { HookContext } from "../../src/hooks/types.ts";
import { ByteReplacer } from "../../src/stream/restamp.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const ctx: HookContext = { requestId: "r", group: "g", clientModel: "gpt-4o", upstreamModel: "meta-llama/Llama-3.1-8B", backendId: "b", stream: true };

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

  it("passes a chunk without the pattern through as the same bytes, holding nothing back", () => {
    const t = new ByteReplacer(enc.encode('"model":"x"'), enc.encode('"model":"y"'));
    const chunk = enc.encode('data: {"a":"b"}\n\n');
    expect(t.transform(chunk)).toBe(chunk);
    expect(t.flush()).toBeNull();
  });

  it("holds back only a tail that could begin the pattern, and flushes it at the end", () => {
    const t = new ByteReplacer(enc.encode('"model":"x"'), enc.encode('"model":"y"'));
    expect(dec.decode(t.transform(enc.encode('{"id":1,"mod')))).toBe('{"id":1,');
    expect(dec.decode(t.flush() ?? new Uint8Array())).toBe('"mod');
  });

  it("leaves other models' names alone and does nothing when names already agree", () => {
    expect(run([event(1, "other-model")])).toBe(event(1, "other-model"));
    expect(restampHook.onChunk?.({ ...ctx, upstreamModel: ctx.clientModel })).toBeNull();
  });
});
