import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFeaturesUpstream, type FeaturesUpstream } from "../support/vllm-features-upstream.ts";
import { adminFetch, issuedKey } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Chat Completions' richer features through the gateway in workerd, the official SDK as the client
 * and an upstream that answers them as vLLM does: several choices interleaved in one stream,
 * parallel tool calls whose arguments come in pieces, logprobs, the usage event asked for or not
 * (taken out again for a key that counts tokens), the model restamped, vLLM's own fields passed on
 * and its 400 relayed.
 */

let upstream: FeaturesUpstream;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;

beforeAll(async () => {
  upstream = await startFeaturesUpstream();
  gw = await startTestGateway(
    {
      modelGroups: [
        { name: "feat", deployments: [{ id: "f", baseUrl: upstream.url, model: "feat" }] },
        { name: "feat-restamped", hooks: ["restamp"], deployments: [{ id: "r", baseUrl: upstream.url, model: "upstream-7b" }] },
        // The same answers cut every 7 bytes: inside keys, the model's value and the usage event.
        { name: "feat-cut", hooks: ["restamp"], deployments: [{ id: "c", baseUrl: `${upstream.url}/cut:7`, model: "upstream-7b" }] },
        { name: "feat-two", deployments: [{ id: "a", baseUrl: upstream.url, model: "feat-two" }, { id: "b", baseUrl: upstream.url, model: "feat-two" }] },
        { name: "feat-strict", deployments: [{ id: "s", baseUrl: `${upstream.url}/strict`, model: "feat" }] },
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey },
  );
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const admin = (method: string, path: string, body?: unknown): Promise<Response> => adminFetch(gw.url, adminKey, method, path, body);
const createKey = (): Promise<{ id: string; key: string }> => issuedKey(gw.url, adminKey);

async function usageOf(id: string): Promise<{ prompt_tokens: number; completion_tokens: number; requests: number }> {
  return (await (await admin("GET", `/usage?key=${id}`)).json()) as { prompt_tokens: number; completion_tokens: number; requests: number };
}

const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
const messages = [{ role: "user" as const, content: "hello" }];
const tools = ["weather", "time"].map((name) => ({ type: "function" as const, function: { name, parameters: { type: "object", properties: { city: { type: "string" } } } } }));

describe("several choices in one stream (n: 3)", () => {
  for (const who of ["master key", "key counting tokens"] as const) {
    for (const asked of [false, true]) {
      it(`reach the client each whole, restamped, its usage event there only if asked (${asked ? "asked" : "not asked"}), counted once (${who})`, async () => {
        const k = who === "master key" ? null : await createKey();
        const texts = ["", "", ""];
        const usages: unknown[] = [];
        const models = new Set<string>();
        const stream = await client(k?.key ?? gw.key).chat.completions.create({ model: "feat-restamped", messages, n: 3, stream: true, ...(asked ? { stream_options: { include_usage: true } } : {}) });
        for await (const chunk of stream) {
          models.add(chunk.model);
          for (const c of chunk.choices) texts[c.index] += c.delta.content ?? "";
          if (chunk.usage) usages.push(chunk.usage);
        }
        expect(texts).toEqual(["hi there", "hi there", "hi there"]);
        expect([...models]).toEqual(["feat-restamped"]);
        expect(usages).toEqual(asked ? [expect.objectContaining({ prompt_tokens: 11, completion_tokens: 6 })] : []);
        if (k) {
          await vi.waitFor(async () => expect((await usageOf(k.id)).requests).toBe(1), EVENTUALLY);
          expect(await usageOf(k.id)).toMatchObject({ prompt_tokens: 11, completion_tokens: 6 });
        }
      });
    }
  }

  it("non-streamed, with logprobs: every choice, restamped, counted once", async () => {
    const k = await createKey();
    for (const model of ["feat", "feat-restamped"]) {
      const r = await client(k.key).chat.completions.create({ model, messages, n: 3, logprobs: true, top_logprobs: 20 });
      expect(r.model).toBe(model);
      expect(r.choices.map((c) => c.message.content)).toEqual(["hi there", "hi there", "hi there"]);
    }
    await vi.waitFor(async () => expect((await usageOf(k.id)).requests).toBe(2), EVENTUALLY);
    expect(await usageOf(k.id)).toMatchObject({ prompt_tokens: 22, completion_tokens: 12 });
  });
});

describe("parallel tool calls streamed, arguments in pieces, the stream cut every 7 bytes", () => {
  it("assemble in the SDK as sent, in every choice, restamped only where the model is named, the usage event as asked", async () => {
    const k = await createKey();
    for (const key of [gw.key, k.key]) {
      for (const asked of [false, true]) {
        const models = new Set<string>();
        let usages = 0;
        const stream = client(key).chat.completions.stream({ model: "feat-cut", messages, tools, n: 3, parallel_tool_calls: true, logprobs: true, top_logprobs: 5, ...(asked ? { stream_options: { include_usage: true } } : {}) });
        stream.on("chunk", (c) => {
          models.add(c.model);
          if (c.usage) usages++;
        });
        const final = await stream.finalChatCompletion();
        expect([...models]).toEqual(["feat-cut"]);
        expect(usages).toBe(asked ? 1 : 0);
        for (const [i, choice] of final.choices.entries()) {
          expect(choice.finish_reason).toBe("tool_calls");
          // The arguments name the upstream's model as a value of a "model" key: a string's content, left alone.
          expect(choice.message.tool_calls).toMatchObject([0, 1].map((t) => ({ id: `call_${i}_${t}`, function: { name: tools[t]?.function.name, arguments: `{"city": "Paris ${i}-${t}", "model": "upstream-7b"}` } })));
        }
      }
    }
    await vi.waitFor(async () => expect((await usageOf(k.id)).requests).toBe(2), EVENTUALLY);
    // 8 events a choice (each tool's opening and 3 pieces), 3 choices, twice.
    expect(await usageOf(k.id)).toMatchObject({ prompt_tokens: 22, completion_tokens: 48 });
  });
});

describe("a tool-using conversation", () => {
  it("shares each turn's prefix with the next: the assistant's tool calls and the tool's result are hashed as sent back", async () => {
    const convo: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: "You are a weather bot. ".repeat(30) },
      { role: "user", content: "weather in Paris? ".repeat(5) },
    ];
    let total = 0;
    for (let turn = 0; turn < 4; turn++) {
      const { data, response } = await client(gw.key).chat.completions.create({ model: "feat-two", messages: convo, tools: tools.slice(0, 1), stream: true }).withResponse();
      const calls: { id: string; type: "function"; function: { name: string; arguments: string } }[] = [];
      for await (const chunk of data) {
        for (const t of chunk.choices[0]?.delta.tool_calls ?? []) {
          const call = (calls[t.index] ??= { id: t.id ?? "", type: "function", function: { name: t.function?.name ?? "", arguments: "" } });
          call.function.arguments += t.function?.arguments ?? "";
        }
      }
      const [matched, blocks] = (response.headers.get("x-kvgate-prefix-blocks") ?? "").split("/").map(Number) as [number, number];
      if (turn > 0) {
        expect(response.headers.get("x-kvgate-reason")).toBe("prefix-hit");
        expect(matched).toBe(total);
      }
      expect(blocks).toBeGreaterThan(total);
      total = blocks;
      convo.push({ role: "assistant", content: null, tool_calls: calls }, { role: "tool", tool_call_id: calls[0]?.id ?? "", content: `sunny ${turn}` });
    }
  });
});

describe("fields the gateway does not read", () => {
  it("reach vLLM as sent: its own extensions, response_format, stop, seed, both token limits, user", async () => {
    const extra = {
      top_k: 5,
      min_p: 0.1,
      repetition_penalty: 1.1,
      guided_json: { type: "object" },
      chat_template_kwargs: { enable_thinking: false },
      priority: 3,
      seed: 7,
      stop: ["x"],
      max_completion_tokens: 9,
      max_tokens: 4,
      user: "u",
      response_format: { type: "json_schema", json_schema: { name: "s", schema: { type: "object" } } },
    };
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "feat", messages, ...extra }),
    });
    expect(res.status).toBe(200);
    expect(upstream.bodies.at(-1)).toEqual({ model: "feat", messages, ...extra });
  });

  it("a server's 400 for OpenAI's metadata and store reaches the SDK as it said it, streamed or not", async () => {
    const k = await createKey();
    const whole = await client(gw.key)
      .chat.completions.create({ model: "feat-strict", messages, metadata: { a: "b" } })
      .catch((e: unknown) => e);
    expect(whole).toBeInstanceOf(OpenAI.BadRequestError);
    expect(whole).toMatchObject({ status: 400, message: "400 1 validation error: metadata Extra inputs are not permitted", type: "BadRequestError" });
    const streamed = await (async () => {
      for await (const _ of await client(k.key).chat.completions.create({ model: "feat-strict", messages, store: true, stream: true })) {
        // Nothing comes.
      }
    })().catch((e: unknown) => e);
    expect(streamed).toMatchObject({ status: 400, message: "400 1 validation error: store Extra inputs are not permitted" });
  });
});
