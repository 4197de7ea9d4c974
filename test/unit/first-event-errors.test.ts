import { describe, expect, it } from "vitest";
import { readFirstBytes } from "../../src/stream/first-bytes.ts";
import { streamErrorAnswer } from "../../src/upstream/answer.ts";
import { parseErrorEvent } from "../../src/upstream/error-body.ts";

/**
 * A stream whose first event is its server's error answered nothing: readFirstBytes says so
 * (`error`), and the error is judged as the same request unstreamed would have been answered.
 */

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A body of `chunks`; with `open`, it never ends after them (a stream still under way). */
function source(chunks: string[], open = false): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      const next = chunks[i++];
      if (next !== undefined) c.enqueue(enc.encode(next));
      else if (!open) c.close();
      else return new Promise<void>(() => {});
    },
  });
}

/** `text` cut every `n` characters. */
const cut = (text: string, n: number): string[] => Array.from({ length: Math.ceil(text.length / n) }, (_, i) => text.slice(i * n, i * n + n));

const VLLM_500 = `data: ${JSON.stringify({ error: { message: "Internal server error", type: "InternalServerError", param: null, code: 500 } })}\n\n`;
const SGLANG_400 = `data: ${JSON.stringify({ error: { object: "error", message: "too long", type: "BadRequestError", param: null, code: 400 } })}\n\n`;
// vLLM's older layout: json.dumps's separators, the fields at the top level.
const VLLM_OLD = 'data: {"object": "error", "message": "bad", "type": "BadRequestError", "param": null, "code": 400}\n\n';
const TOKEN = `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "error" }, finish_reason: null }] })}\n\n`;
const DONE = "data: [DONE]\n\n";
// llama.cpp (llama-server, 2024 to mid-2025) writes a stream's error as an `error:` field and no data: server_sent_event(sink, "error", …).
const LLAMACPP_DATA = JSON.stringify({ code: 400, message: "the request exceeds the available context size, try increasing it", type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 });
const LLAMACPP_400 = `error: ${LLAMACPP_DATA}\n\n`;
const CREATED = `event: response.created\ndata: ${JSON.stringify({ type: "response.created", response: { id: "r", status: "in_progress", error: null } })}\n\n`;
const DELTA = `event: response.output_text.delta\ndata: ${JSON.stringify({ type: "response.output_text.delta", delta: "error" })}\n\n`;
const RESPONSES_ERROR = `event: error\ndata: ${JSON.stringify({ type: "error", code: "server_error", message: "engine failed", param: null, sequence_number: 1 })}\n\n`;
const RESPONSE_FAILED = `event: response.failed\ndata: ${JSON.stringify({ type: "response.failed", response: { id: "r", status: "failed", error: { code: "rate_limit_exceeded", message: "busy" } } })}\n\n`;

describe("readFirstBytes of a stream whose first event is its server's error", () => {
  it.each([
    ["vLLM's", [VLLM_500 + DONE]],
    ["SGLang's", [SGLANG_400, DONE]],
    ["vLLM's older layout", [VLLM_OLD + DONE]],
    ["a comment before it", [": waiting\n\n", VLLM_500 + DONE]],
    ["a comment before it in the same chunk", [": waiting\n\n" + VLLM_500 + DONE]],
    ["CRLF line ends", [VLLM_500.replaceAll("\n", "\r\n") + DONE]],
    ["cut every 7 bytes", cut(VLLM_500 + DONE, 7)],
    ["cut before its error field", ["data: {", VLLM_500.slice(7) + DONE]],
    // Found by review: a first chunk that ended before `data:` could be read, or after whole lines
    // that were no data line, was handed on unchecked.
    ["cut every 3 bytes", cut(VLLM_500 + DONE, 3)],
    ["its data line's name cut", ["dat", VLLM_500.slice(3) + DONE]],
    ["a comment, then its data line's name cut, in one chunk", [": waiting\n\nda", VLLM_500.slice(2) + DONE]],
    ["an `event: error` line alone in the first chunk", ["event: error\n", VLLM_500 + DONE]],
  ])("%s: its data comes back as the error, with the bytes held", async (_, chunks) => {
    const first = await readFirstBytes(source(chunks, true), () => 1, true);
    expect(first?.error).toBeDefined();
    expect(first?.error).toMatch(/^\{"(error|object)"/);
    expect(dec.decode(first?.chunk)).toContain('"error"');
  });

  it.each([
    ["a token whose text is the word error", [TOKEN]],
    ["a token, then an error event in the same chunk (an error after the first token is passed on)", [TOKEN + VLLM_500]],
    ["a token cut in its data line", cut(TOKEN, 20)],
  ])("%s: no error, and the first event is the first bytes while the stream goes on", async (_, chunks) => {
    const first = await readFirstBytes(source(chunks, true), () => 1, true);
    expect(first?.error).toBeUndefined();
    expect(dec.decode(first?.chunk).startsWith(TOKEN)).toBe(true);
  });

  it.each([
    ["llama.cpp's error field, then [DONE]", [LLAMACPP_400 + DONE]],
    ["llama.cpp's error field alone in its chunk", [LLAMACPP_400, DONE]],
    ["llama.cpp's error field with CRLF line ends", [LLAMACPP_400.replaceAll("\n", "\r\n") + DONE]],
    ["llama.cpp's error field cut every 7 bytes", cut(LLAMACPP_400 + DONE, 7)],
    ["llama.cpp's error field cut every 3 bytes", cut(LLAMACPP_400 + DONE, 3)],
    ["llama.cpp's error field after a comment", [": waiting\n\n", LLAMACPP_400 + DONE]],
  ])("%s: the field's value comes back as the error, with the bytes held", async (_, chunks) => {
    const first = await readFirstBytes(source(chunks, true), () => 1, true);
    expect(first?.error).toBe(LLAMACPP_DATA);
    expect(dec.decode(first?.chunk)).toContain("error: {");
  });

  it("a token, then llama.cpp's error field in the same chunk: no error (an error after the first token is passed on)", async () => {
    const first = await readFirstBytes(source([TOKEN + LLAMACPP_400], true), () => 1, true);
    expect([dec.decode(first?.chunk), first?.error]).toEqual([TOKEN + LLAMACPP_400, undefined]);
  });

  it("a first chunk whose data line ends and says no error is handed on at once: nothing more is awaited", async () => {
    const ok = TOKEN.replace('"error"', '"ok"');
    const first = await readFirstBytes(source([ok.slice(0, -1), "\n"], true), () => 1, true);
    expect(dec.decode(first?.chunk)).toBe(ok.slice(0, -1));
  });

  it("a first event held for the check that never ends is what came, as it would be unchecked", async () => {
    const first = await readFirstBytes(source(['data: {"error"', ': {"message": "x"}}']), () => 1, true);
    expect([dec.decode(first?.chunk), first?.error]).toEqual(['data: {"error": {"message": "x"}}', undefined]);
  });

  it("a non-streamed body is not looked at", async () => {
    const body = JSON.stringify({ error: { message: "x" } });
    expect(await readFirstBytes(source([body]), () => 1)).toEqual({ chunk: enc.encode(body), at: 1 });
  });

  it.each([
    ["the API's error event", RESPONSES_ERROR],
    ["response.failed", RESPONSE_FAILED],
    ["chat's shape", VLLM_500],
  ])("a Responses API stream whose first event after its openings is %s: an error", async (_, event) => {
    const first = await readFirstBytes(source([CREATED, event], true), () => 1, true, true);
    expect(first?.error).toBe(event.slice(event.indexOf("data: ") + 6, -2));
  });

  it("a Responses API stream whose first event after its openings is an `error:` field: its value is the error", async () => {
    const first = await readFirstBytes(source([CREATED, LLAMACPP_400 + DONE], true), () => 1, true, true);
    expect(first?.error).toBe(LLAMACPP_DATA);
  });

  it("a Responses API stream whose first token says error in its text: no error", async () => {
    const first = await readFirstBytes(source([CREATED + DELTA], true), () => 1, true, true);
    expect([dec.decode(first?.chunk), first?.error]).toEqual([CREATED + DELTA, undefined]);
  });
});

describe("what a stream's error event is judged as", () => {
  const judged = (data: string) => streamErrorAnswer(parseErrorEvent(data), null);
  const dataOf = (event: string) => event.slice(event.indexOf("data: ") + 6, -2);

  it.each([
    ["vLLM's 500", dataOf(VLLM_500), { status: 500, answer: { kind: "backend-failure", why: "server-error" } }],
    ["SGLang's 400", dataOf(SGLANG_400), { status: 400, answer: { kind: "rejected" } }],
    ["vLLM's older 400", dataOf(VLLM_OLD), { status: 400, answer: { kind: "rejected" } }],
    ["the Responses API's error event", dataOf(RESPONSES_ERROR), { status: 500, answer: { kind: "backend-failure", why: "server-error" } }],
    ["response.failed for a rate limit", dataOf(RESPONSE_FAILED), { status: 429, answer: { kind: "rate-limited" } }],
    ["llama.cpp's error field, a prompt past its context", LLAMACPP_DATA, { status: 400, answer: { kind: "rejected" } }],
    ["TGI's validation error", JSON.stringify({ error: "Input validation error: too long", error_type: "validation" }), { status: 422, answer: { kind: "rejected" } }],
    ["TGI's overloaded", JSON.stringify({ error: "Model is overloaded", error_type: "overloaded" }), { status: 429, answer: { kind: "rate-limited" } }],
    ["an error that states nothing", JSON.stringify({ error: { message: "?" } }), { status: 500, answer: { kind: "backend-failure", why: "server-error" } }],
    ["a type named as an object's property", JSON.stringify({ error: { message: "?", type: "constructor", code: "__proto__" } }), { status: 500, answer: { kind: "backend-failure", why: "server-error" } }],
    ["a code past any status", JSON.stringify({ error: { message: "?", code: 1234 } }), { status: 500, answer: { kind: "backend-failure", why: "server-error" } }],
  ])("%s", (_, data, expected) => {
    expect(judged(data)).toEqual(expected);
  });

  it("the Responses API's error event: its own type and sequence number are not the error's", () => {
    expect(parseErrorEvent(dataOf(RESPONSES_ERROR))).toEqual({ message: "engine failed", type: null, code: "server_error", param: null, extra: {} });
  });

  it("takes the gateway's secrets out of what it says", () => {
    const data = JSON.stringify({ type: "response.failed", response: { error: { code: "server_error", message: "auth was Bearer sk-gpu-secret" } } });
    expect(parseErrorEvent(data, ["sk-gpu-secret"])?.message).toBe("auth was Bearer [redacted]");
  });
});

describe("a first event that may be an error, dripped a byte at a time", () => {
  it("is held only so far (64 KiB) to be checked: past it, what came goes on unchecked, before the event ends", async () => {
    // An upstream that never ends its first event: the check must not hold all of it (up to 1 MiB, a piece a byte).
    const first = await readFirstBytes(source(['data: {"error": "', ...Array.from({ length: 200_000 }, () => "x")], true), () => 0, true);
    expect(first?.error).toBeUndefined();
    expect(first?.chunk.length).toBeGreaterThan(64 * 1024);
    expect(first?.chunk.length).toBeLessThan(65 * 1024);
    expect(dec.decode(first?.chunk).startsWith('data: {"error": "xxx')).toBe(true);
  });
});
