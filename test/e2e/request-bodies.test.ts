import { gzipSync } from "node:zlib";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { postByteChunks } from "../support/byte-chunks.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What clients of vLLM, SGLang and llama.cpp send, through the bundled gateway on a real socket
 * with the official SDK where it has the call: the gateway passes on what it has no reason to
 * judge, and refuses what it cannot serve saying why.
 */

let upstream: HostileUpstream;
let gw: TestGateway;
let client: OpenAI;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({
    modelGroups: [
      { name: "bodies", deployments: [{ id: "ok", baseUrl: `${upstream.url}/ok`, model: "hostile-7b" }] },
      { name: "sglang", deployments: [{ id: "sglang", baseUrl: `${upstream.url}/sglang`, model: "hostile-7b" }] },
    ],
  });
  client = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
beforeEach(() => upstream.reset());

interface Reply {
  status: number;
  headers: Headers;
  json: { error?: Record<string, unknown> } & Record<string, unknown>;
}

async function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json", ...headers },
    body: typeof body === "string" || body instanceof Uint8Array ? (body as string | Uint8Array<ArrayBuffer>) : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as Reply["json"] };
}

/** The last body the upstream behaviour received. */
const lastBody = (behaviour: string) => upstream.stats(behaviour).bodies.at(-1) as Record<string, unknown> | undefined;

describe("numbers a JavaScript number cannot hold", () => {
  it("reach the upstream as the client wrote them: an int64 seed, an exponent past a double's range", async () => {
    // The text as Python's json.dumps writes it: seed=2**63-1, and a schema bound of 1e400.
    const text = `{"model":"bodies","__proto__":{"stream":true},"seed":9223372036854775807,"messages":[{"role":"user","content":"9223372036854775807"}],"temperature":0.7,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"number","maximum":1e400,"minimum":-18446744073709551615}}}]}`;
    const r = await post("/v1/chat/completions", text);
    expect(r.status).toBe(200);
    const sent = upstream.stats("ok").texts.at(-1) as string;
    expect(sent).toContain(`"seed":9223372036854775807`);
    expect(sent).toContain(`"maximum":1e400`);
    expect(sent).toContain(`"minimum":-18446744073709551615`);
    expect(sent).toContain(`"temperature":0.7`);
    expect(sent).toContain(`"content":"9223372036854775807"`);
    // What validation dropped stays dropped.
    expect(sent).not.toContain("__proto__");
  });

  it("beside 2 million small numbers: the seed reaches the upstream as written, and so does every other number", async () => {
    const numbers = Array.from({ length: 2_000_000 }, () => "1").join(",");
    const text = `{"model":"bodies","seed":18446744073709551615,"messages":[{"role":"user","content":"hi"}],"x":[${numbers}]}`;
    const r = await post("/v1/chat/completions", text);
    expect(r.status).toBe(200);
    const sent = upstream.stats("ok").texts.at(-1) as string;
    expect(sent).toContain(`"seed":18446744073709551615`);
    expect(sent).toContain(`"x":[${numbers}]`);
  });

  it("in a long tools list generated from an OpenAPI or protobuf schema (300 tools, one uint64 bound): served, the bound sent as written", async () => {
    const parameter = (max: string) => `{"type":"integer","description":"a count","format":"uint64","minimum":0,"maximum":${max}}`;
    const tool = (i: number) =>
      `{"type":"function","function":{"name":"f${i}","description":"does f","parameters":{"type":"object","properties":{${Array.from({ length: 10 }, (_, p) => `"p${p}":${parameter(i === 7 && p === 3 ? "18446744073709551615" : "100")}`).join(",")}},"required":["p0"]}}}`;
    const text = `{"model":"bodies","messages":[{"role":"user","content":"hi"}],"tools":[${Array.from({ length: 300 }, (_, i) => tool(i)).join(",")}]}`;
    const r = await post("/v1/chat/completions", text);
    expect(r.status).toBe(200);
    expect(upstream.stats("ok").texts.at(-1) as string).toContain(`"maximum":18446744073709551615`);
  });

  it("throughout a field too large to parse again keeping them (690,000 × 1e999, within 4 MiB): a 400 naming the field, none changed upstream", async () => {
    const text = `{"model":"bodies","messages":[{"role":"user","content":"hi"}],"x":[${Array.from({ length: 690_000 }, () => "1e999").join(",")}]}`;
    const r = await post("/v1/chat/completions", text);
    expect([r.status, r.json.error?.code, r.json.error?.param]).toEqual([400, "json_too_complex", "x"]);
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it("in a field the gateway reads as a number are a 400 naming it, not a changed value", async () => {
    const r = await post("/v1/chat/completions", `{"model":"bodies","max_tokens":18446744073709551615,"messages":[{"role":"user","content":"hi"}]}`);
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: "max_tokens" });
    expect(upstream.stats("ok").requests).toBe(0);
  });
});

describe("null in a chat message's optional fields (vLLM and SGLang take it)", () => {
  it("a conversation continued with SGLang's own answer (`tool_calls: null`) is served, and the null reaches the upstream", async () => {
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: "hi" }];
    const first = await client.chat.completions.create({ model: "sglang", messages });
    expect(first.choices[0]?.message).toMatchObject({ role: "assistant", content: "ok", tool_calls: null });
    messages.push(first.choices[0]?.message as OpenAI.Chat.ChatCompletionMessageParam, { role: "user", content: "and again" });
    const second = await client.chat.completions.create({ model: "sglang", messages });
    expect(second.choices[0]?.message.content).toBe("ok");
    expect(upstream.stats("sglang").requests).toBe(2);
    expect((lastBody("sglang")?.messages as unknown[])[1]).toEqual({ role: "assistant", content: "ok", reasoning_content: null, tool_calls: null });
  });

  it.each([["name"], ["tool_call_id"], ["tool_calls"]])("`%s: null` is served, and routed as the message without it", async (field) => {
    const message = { role: "assistant", content: "A long enough answer to fill a few blocks of the prompt's hash chain. ".repeat(4) };
    const without = await post("/v1/chat/completions", { model: "bodies", messages: [message, { role: "user", content: field }] });
    expect(without.status).toBe(200);
    const withNull = await post("/v1/chat/completions", { model: "bodies", messages: [{ ...message, [field]: null }, { role: "user", content: field }] });
    expect(withNull.status).toBe(200);
    // The same prompt: every block the first request's backend learned matches.
    const total = (without.headers.get("x-kvgate-prefix-blocks") ?? "").split("/")[1];
    expect(Number(total)).toBeGreaterThan(1);
    expect(withNull.headers.get("x-kvgate-prefix-blocks")).toBe(`${total}/${total}`);
    expect((lastBody("ok")?.messages as Record<string, unknown>[])[0]).toHaveProperty(field, null);
  });

  it("a field of the wrong type is still a 400 naming it", async () => {
    const r = await post("/v1/chat/completions", { model: "bodies", messages: [{ role: "assistant", content: null, tool_calls: "none" }] });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: "messages[0].tool_calls", message: "messages[0].tool_calls must be an array" });
    expect(upstream.stats("ok").requests).toBe(0);
  });
});

describe("a completions prompt given as vLLM's prompt_embeds", () => {
  // A base64 tensor as vLLM reads it; the gateway passes it on unread.
  const promptEmbeds = Buffer.from("a tensor of prompt embeddings").toString("base64");

  it.each([["null", null], ["left out", undefined]])("with `prompt` %s is served, routed as embeddings are (least-loaded, no prefix), the embeds passed on", async (_what, prompt) => {
    // As vLLM's docs call it: completions.create(prompt=None, extra_body={"prompt_embeds": ...}).
    const params = { model: "bodies", prompt, prompt_embeds: promptEmbeds } as unknown as OpenAI.CompletionCreateParamsNonStreaming;
    const { response } = await client.completions.create(params).withResponse();
    expect(response.status).toBe(200);
    expect(response.headers.get("x-kvgate-reason")).toBe("least-loaded");
    expect(response.headers.get("x-kvgate-prefix-blocks")).toBe("0/0");
    expect(lastBody("ok")).toMatchObject({ model: "hostile-7b", prompt_embeds: promptEmbeds });
    expect(lastBody("ok")?.prompt).toBe(prompt);
  });

  it("beside a prompt, the prompt is what is routed on", async () => {
    const { response } = await client.completions.create({ model: "bodies", prompt: "Once upon a time ".repeat(8), prompt_embeds: promptEmbeds } as OpenAI.CompletionCreateParamsNonStreaming).withResponse();
    expect(response.headers.get("x-kvgate-prefix-blocks")).toMatch(/^\d+\/[1-9]\d*$/);
  });

  it.each([
    ["neither", {}],
    ["a null prompt and no embeds", { prompt: null }],
    ["null embeds", { prompt_embeds: null }],
  ])("%s is still a 400 `prompt is required`", async (_what, fields) => {
    const r = await post("/v1/completions", { model: "bodies", ...fields });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: "prompt", message: "prompt is required" });
    expect(upstream.stats("ok").requests).toBe(0);
  });
});

describe("vLLM's content parts without a type", () => {
  const ask = (part: Record<string, unknown>, question = "What is in it?") =>
    client.chat.completions
      .create({ model: "bodies", messages: [{ role: "user", content: [part as unknown as OpenAI.Chat.ChatCompletionContentPart, { type: "text", text: question }] }] })
      .withResponse();

  it.each([["image_url"], ["audio_url"], ["video_url"]])("`{%s: url}` is served and passed on as sent", async (field) => {
    const part = { [field]: `https://media.example/${field}/a-long-enough-name-to-fill-a-block-of-its-own.bin` };
    const { response } = await ask(part);
    expect(response.status).toBe(200);
    expect(lastBody("ok")?.messages).toEqual([{ role: "user", content: [part, { type: "text", text: "What is in it?" }] }]);
  });

  it("is hashed as its JSON: the same part again is the same prompt, another URL another", async () => {
    const part = { image_url: "https://media.example/cat-on-a-mat-photographed-in-the-afternoon-light.jpg" };
    const first = await ask(part, "Describe it.");
    const total = Number((first.response.headers.get("x-kvgate-prefix-blocks") ?? "").split("/")[1]);
    expect(total).toBeGreaterThan(1);
    expect((await ask(part, "Describe it.")).response.headers.get("x-kvgate-prefix-blocks")).toBe(`${total}/${total}`);
    const other = await ask({ image_url: "https://media.example/dog-on-a-mat-photographed-in-the-afternoon-light.jpg" }, "Describe it.");
    const [matched, of] = (other.response.headers.get("x-kvgate-prefix-blocks") ?? "").split("/").map(Number);
    expect(of).toBe(total);
    expect(matched).toBeLessThan(total);
  });

  it("a plain string part is served as vLLM takes it, and hashed as the same text in a text part", async () => {
    const long = "A plain string part, long enough to fill a block of the prompt's own. ".repeat(4);
    const plain = await client.chat.completions.create({ model: "bodies", messages: [{ role: "user", content: [long as unknown as OpenAI.Chat.ChatCompletionContentPart] }] }).withResponse();
    expect(plain.response.status).toBe(200);
    expect(lastBody("ok")?.messages).toEqual([{ role: "user", content: [long] }]);
    const total = plain.response.headers.get("x-kvgate-prefix-blocks")?.split("/")[1];
    const typed = await client.chat.completions.create({ model: "bodies", messages: [{ role: "user", content: [{ type: "text", text: long }] }] }).withResponse();
    expect(typed.response.headers.get("x-kvgate-prefix-blocks")).toBe(`${total}/${total}`);
  });

  it("a part that is neither an object nor a string, or a type that is not a string, is still a 400", async () => {
    for (const part of [7, null, ["text"], { type: 7, text: "x" }]) {
      const r = await post("/v1/chat/completions", { model: "bodies", messages: [{ role: "user", content: [part] }] });
      expect(r.status).toBe(400);
      expect(r.json.error).toMatchObject({ param: "messages[0].content" });
    }
    expect(upstream.stats("ok").requests).toBe(0);
  });
});

describe("sampling values are the server's to judge: only their types are checked", () => {
  // vLLM takes a temperature over 2 and n over 128, llama.cpp a max_tokens of -1 for "no limit".
  const beyond = { temperature: 2.5, top_p: 1.5, n: 200, max_tokens: -1 };

  it("chat: OpenAI's caps are not applied, and the values reach the upstream as sent", async () => {
    const r = await client.chat.completions.create({ model: "bodies", messages: [{ role: "user", content: "hi" }], ...beyond, max_completion_tokens: -1 });
    expect(r.choices[0]?.message.content).toBe("ok");
    expect(lastBody("ok")).toMatchObject({ ...beyond, max_completion_tokens: -1 });
  });

  it("completions too", async () => {
    await client.completions.create({ model: "bodies", prompt: "Once upon a time", ...beyond });
    expect(lastBody("ok")).toMatchObject(beyond);
  });

  it("responses too", async () => {
    await client.responses.create({ model: "bodies", input: "hi", temperature: 2.5, top_p: 1.5, max_output_tokens: -1 });
    expect(lastBody("ok")).toMatchObject({ temperature: 2.5, top_p: 1.5, max_output_tokens: -1 });
  });

  it.each([
    ["/v1/chat/completions", "temperature", "hot", "temperature must be a number"],
    ["/v1/chat/completions", "top_p", [1], "top_p must be a number"],
    ["/v1/chat/completions", "n", 1.5, "n must be an integer"],
    ["/v1/chat/completions", "max_tokens", "16", "max_tokens must be a number"],
    ["/v1/completions", "max_tokens", 0.5, "max_tokens must be an integer"],
    ["/v1/responses", "max_output_tokens", true, "max_output_tokens must be a number"],
  ])("%s: a %s of the wrong type is still a 400 naming it", async (path, field, value, message) => {
    const base = path === "/v1/responses" ? { input: "hi" } : path === "/v1/completions" ? { prompt: "hi" } : { messages: [{ role: "user", content: "hi" }] };
    const r = await post(path, { model: "bodies", ...base, [field]: value });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: field, message });
    expect(upstream.stats("ok").requests).toBe(0);
  });
});

describe("a body with a Content-Encoding", () => {
  const chat = JSON.stringify({ model: "bodies", messages: [{ role: "user", content: "hi" }] });
  const send = (body: Uint8Array<ArrayBuffer> | string, encoding: string) =>
    post("/v1/chat/completions", body, { "content-encoding": encoding });

  it("gzip is refused with a 415 naming it, not read as a body of invalid UTF-8 (workerd hands it over still compressed)", async () => {
    const r = await send(new Uint8Array(gzipSync(chat)), "gzip");
    expect(r.status).toBe(415);
    expect(r.headers.get("accept-encoding")).toBe("identity");
    expect(r.json.error).toEqual({ type: "invalid_request_error", code: "unsupported_content_encoding", param: null, message: expect.stringContaining("Content-Encoding gzip is not supported") });
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it.each([["br"], ["deflate"], ["GZIP"], ["gzip, identity"]])("so is %s, whatever the body holds", async (encoding) => {
    const r = await send(chat, encoding);
    expect(r.status).toBe(415);
    expect(r.json.error).toMatchObject({ code: "unsupported_content_encoding", message: expect.stringContaining(`Content-Encoding ${encoding} is not supported`) });
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it.each([["identity"], ["Identity"], [""]])("%j is the body as it is: served", async (encoding) => {
    expect((await send(chat, encoding)).status).toBe(200);
  });
});

describe("a background Responses request", () => {
  it("is refused with a 400 naming background and saying why: no backend's stored response can be fetched through the gateway", async () => {
    const err = await client.responses.create({ model: "bodies", input: "hi", background: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({
      type: "invalid_request_error",
      param: "background",
      message: expect.stringMatching(/^background is not supported: .*GET \/v1\/responses\/\{id\}.*which backend/),
    });
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it.each([[false], [null]])("background: %j is served", async (background) => {
    const r = await post("/v1/responses", { model: "bodies", input: "hi", background });
    expect(r.status).toBe(200);
    expect(lastBody("ok")).toHaveProperty("background", background);
  });
});

describe("another method on /v1/models and /v1/models/{id}", () => {
  const paths = ["/v1/models", "/v1/models/bodies", "/v1/models/meta-llama/No-Such-Model"];

  it.each(paths.flatMap((path) => ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"].map((method) => [method, path])))("%s %s is a 405 with Allow: GET, HEAD", async (method, path) => {
    const res = await fetch(`${gw.url}${path}`, { method, headers: { authorization: `Bearer ${gw.key}` } });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD");
    expect(((await res.json()) as Reply["json"]).error).toMatchObject({ type: "invalid_request_error", code: "method_not_allowed", message: `use GET or HEAD for ${path}` });
  });

  it("the SDK's models.delete gets the 405", async () => {
    const err = await client.models.delete("bodies").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(405);
  });

  it.each(paths.slice(0, 2))("HEAD %s is still answered as GET is", async (path) => {
    const res = await fetch(`${gw.url}${path}`, { method: "HEAD", headers: { authorization: `Bearer ${gw.key}` } });
    expect(res.status).toBe(200);
  });

  it("a key is still asked for first, and a preflight (which carries none) is answered as before", async () => {
    expect((await fetch(`${gw.url}/v1/models`, { method: "DELETE" })).status).toBe(401);
    const preflight = await fetch(`${gw.url}/v1/models`, { method: "OPTIONS", headers: { origin: "https://app.example", "access-control-request-method": "GET" } });
    expect(preflight.status).toBe(401);
    expect(preflight.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("a chunked body that comes a byte per chunk", () => {
  it("is read whole and served, however many chunks it came in", async () => {
    // 250,000 chunks of one byte: more than a call takes arguments, so the parts must not be spread into one.
    const text = JSON.stringify({ model: "bodies", max_tokens: 1, messages: [{ role: "user", content: "drip ".repeat(50_000) }] });
    const answer = await postByteChunks(gw.url, "/v1/chat/completions", gw.key, Buffer.from(text));
    expect(answer.split("\r\n")[0]).toBe("HTTP/1.1 200 OK");
    expect(String((lastBody("ok")?.messages as { content: string }[] | undefined)?.[0]?.content).length).toBe(250_000);
  });
});
