import { describe, expect, it } from "vitest";
import { EVENT_TAIL_MAX_BYTES, EventTail } from "../../src/stream/event-tail.ts";
import { UsageTap } from "../../src/stream/usage-tap.ts";
import { BodyEnds, responsesTailBytes } from "../../src/stream/usage.ts";

/**
 * A Responses API stream's usage is in its closing event (response.completed), which repeats the
 * whole output before the usage: the event of a long answer is longer than anything sized by the
 * request, and it is read whole however long it is.
 */

const enc = new TextEncoder();
const USAGE = { input_tokens: 107, input_tokens_details: { cached_tokens: 64 }, output_tokens: 6000, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 6107 };
const CHARGED = { promptTokens: 107, completionTokens: 6000, cachedTokens: 64, cacheReported: true };

function event(type: string, data: object, eol = "\n"): string {
  return `event: ${type}${eol}data: ${JSON.stringify({ type, ...data })}${eol}${eol}`;
}

/** A stream of `tokens` deltas and its closing event, which repeats them all and `instructions` after its usage. */
function responsesStream(tokens: number, o: { instructions?: string; done?: boolean; eol?: string } = {}): string {
  const eol = o.eol ?? "\n";
  const words = Array.from({ length: tokens }, (_, i) => ` w${i}`);
  const response = { id: "resp_1", object: "response", status: "completed", output: [{ type: "message", content: [{ type: "output_text", text: words.join("") }] }], usage: USAGE, instructions: o.instructions ?? null };
  return [
    event("response.created", { response: { ...response, status: "in_progress", output: [], usage: null } }, eol),
    ...words.map((delta, i) => event("response.output_text.delta", { sequence_number: i + 1, delta }, eol)),
    event("response.completed", { response }, eol),
    o.done ? `data: [DONE]${eol}${eol}` : "",
  ].join("");
}

/** `text` in pieces of `size` bytes (the last one shorter). */
function pieces(text: string, size: number): Uint8Array[] {
  const bytes = enc.encode(text);
  const out: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(bytes.subarray(at, at + size));
  return out;
}

function streamUsage(chunks: Uint8Array[], requestLength = 400): ReturnType<BodyEnds["usage"]> {
  const ends = new BodyEnds(false, responsesTailBytes(requestLength));
  for (const chunk of chunks) ends.push(chunk);
  return ends.usage();
}

describe("a Responses stream's usage, read from its closing event whole", () => {
  it("after 6,000 output tokens, a closing event far longer than the tail a 400-character request keeps", () => {
    const body = responsesStream(6000);
    expect(body.length - body.lastIndexOf("event: response.completed")).toBeGreaterThan(2 * responsesTailBytes(400));
    for (const size of [1, 7, 100, 4096, 65536, body.length]) expect(streamUsage(pieces(body, size))).toEqual(CHARGED);
  });

  it("with a [DONE] after it, CRLF line ends, and the request's instructions repeated after the usage", () => {
    const body = responsesStream(3000, { instructions: "Follow the house style. ".repeat(2000), done: true, eol: "\r\n" });
    for (const size of [3, 1000, 16384]) expect(streamUsage(pieces(body, size), 2000)).toEqual(CHARGED);
  });

  it("a closing event larger than EVENT_TAIL_MAX_BYTES is not read (the answer is charged an estimate), never a piece of it", () => {
    const body = responsesStream(10, { instructions: "x".repeat(EVENT_TAIL_MAX_BYTES + 256 * 1024) });
    expect(streamUsage(pieces(body, 65536))).toBeNull();
  });

  it("keeps no more than the window and the event it begins in while the answer streams", () => {
    const window = responsesTailBytes(400);
    const tail = new EventTail(window, EVENT_TAIL_MAX_BYTES);
    const deltas = responsesStream(20000).split("event: response.completed")[0] as string;
    for (const chunk of pieces(deltas, 1)) tail.push(chunk);
    const { bytes, atEventStart } = tail.view();
    expect(atEventStart).toBe(true);
    expect(bytes.length).toBeGreaterThanOrEqual(window);
    expect(bytes.length).toBeLessThan(window + 1024);
    expect(new TextDecoder().decode(bytes)).toMatch(/^event: response\.output_text\.delta\n/);
  });

  it("through a UsageTap, as a stream no hook rewrites is read", async () => {
    const chunks = pieces(responsesStream(6000, { done: true }), 512);
    let i = 0;
    const source = new ReadableStream<Uint8Array>({ pull: (c) => (i < chunks.length ? c.enqueue(chunks[i++] as Uint8Array) : c.close()) });
    const [client, branch] = source.tee();
    const tap = new UsageTap(branch, () => 1, null, false, responsesTailBytes(400));
    await new Response(client).arrayBuffer();
    tap.finish();
    expect((await tap.ended).usage).toEqual(CHARGED);
  });
});
