import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { startFeaturesUpstream, type FeaturesUpstream } from "../support/vllm-features-upstream.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { metricsText, sampleSum } from "../support/metrics-scrape.ts";
import { adminFetch, issuedKey } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What a virtual key is charged, request shape by request shape, through the path a client takes:
 * the official `openai` SDK, the bundled gateway in workerd on a real socket, and an upstream that
 * counts what it did (the simulated fleet's /metrics) or says what it reported (vLLM-shaped and
 * hostile upstreams). Each request is charged what its upstream reported, once.
 */

let fleet: Fleet;
let features: FeaturesUpstream;
let hostile: HostileUpstream;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const PRICING = { promptUsdPerMillion: 3, cachedPromptUsdPerMillion: 1, completionUsdPerMillion: 7 };

beforeAll(async () => {
  hostile = await startHostileUpstream();
  features = await startFeaturesUpstream();
  // One worker: every request's tokens are its counters' change.
  fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  gw = await startTestGateway(
    {
      modelGroups: [
        { name: "acct", pricing: PRICING, deployments: [{ id: "sim-0", baseUrl: fleet.urls[0] as string, model: "sim-7b" }] },
        { name: "acct-vllm", deployments: [{ id: "f", baseUrl: features.url, model: "feat" }] },
        { name: "acct-sglang-responses", deployments: [{ id: "sg", baseUrl: `${hostile.url}/responses-sglang`, model: "sg" }] },
        { name: "acct-cut", deployments: [{ id: "cut", baseUrl: `${hostile.url}/usage-each-then-cut`, model: "cut" }] },
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey },
  );
});
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  await features?.close();
  await hostile?.close();
});

const admin = (method: string, path: string, body?: unknown): Promise<Response> => adminFetch(gw.url, adminKey, method, path, body);
const createKey = (): Promise<{ id: string; key: string }> => issuedKey(gw.url, adminKey);

interface Charged {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  requests: number;
  cost_usd: number;
}

/** What the key was charged, once its one request's usage has reached the tenants object. */
async function chargedOnce(id: string): Promise<Charged> {
  const read = async () => (await (await admin("GET", `/usage?key=${id}`)).json()) as Charged;
  await vi.waitFor(async () => expect((await read()).requests).toBe(1), EVENTUALLY);
  return read();
}

interface Tokens {
  prompt: number;
  cached: number;
  completion: number;
}

/** The fleet's own counters (GET /metrics). */
async function fleetTokens(): Promise<Tokens> {
  const text = await (await fetch(`${fleet.urls[0]}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\d+)`, "m").exec(text)?.[1] ?? NaN);
  return { prompt: read("kvgate_sim_prompt_tokens_total"), cached: read("kvgate_sim_cached_tokens_total"), completion: read("kvgate_sim_generation_tokens_total") };
}

/** Runs `call` with a new key, and returns what the fleet did for it and what the key was charged. */
async function charge(call: (client: OpenAI) => Promise<void>): Promise<{ did: Tokens; charged: Charged }> {
  const { id, key } = await createKey();
  const before = await fleetTokens();
  await call(new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 }));
  const charged = await chargedOnce(id);
  const after = await fleetTokens();
  return { did: { prompt: after.prompt - before.prompt, cached: after.cached - before.cached, completion: after.completion - before.completion }, charged };
}

const prompt = (what: string) => `Tell me about ${what} ${randomBytes(4).toString("hex")}. ${"Context. ".repeat(40)}`;
const costOf = (t: Tokens) => ((t.prompt - t.cached) * PRICING.promptUsdPerMillion + t.cached * PRICING.cachedPromptUsdPerMillion + t.completion * PRICING.completionUsdPerMillion) / 1e6;

function expectCharged(did: Tokens, charged: Charged): void {
  expect({ prompt: charged.prompt_tokens, cached: charged.cached_tokens, completion: charged.completion_tokens }).toEqual(did);
  expect(charged.cost_usd).toBeCloseTo(costOf(did), 12);
}

describe("each request shape is charged what the upstream reported, once", () => {
  for (const asked of [false, true]) {
    it(`a streamed completion${asked ? ", the usage event asked for" : ""}`, async () => {
      let usageSeen = 0;
      const { did, charged } = await charge(async (client) => {
        const stream = await client.completions.create({ model: "acct", prompt: prompt("completions"), max_tokens: 9, stream: true, ...(asked ? { stream_options: { include_usage: true } } : {}) });
        for await (const chunk of stream) if (chunk.usage) usageSeen++;
      });
      expect(usageSeen).toBe(asked ? 1 : 0);
      expect(did.completion).toBe(9);
      expectCharged(did, charged);
    });

    it(`a streamed chat completion${asked ? ", the usage event asked for" : ""}, its prompt partly cached`, async () => {
      const content = prompt("chat");
      const client = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
      // The master key warms the prefix: nothing it does is counted.
      await client.chat.completions.create({ model: "acct", messages: [{ role: "user", content }], max_tokens: 1 });
      const { did, charged } = await charge(async (c) => {
        const stream = await c.chat.completions.create({ model: "acct", messages: [{ role: "user", content }, { role: "assistant", content: "ok" }, { role: "user", content: "more" }], max_tokens: 7, stream: true, ...(asked ? { stream_options: { include_usage: true } } : {}) });
        for await (const chunk of stream) if (asked === false) expect(chunk.usage ?? null).toBeNull();
      });
      expect(did.cached).toBeGreaterThan(0);
      expectCharged(did, charged);
    });
  }

  it("a non-streamed completion and chat completion", async () => {
    for (const kind of ["completions", "chat"] as const) {
      const { did, charged } = await charge(async (client) => {
        if (kind === "completions") await client.completions.create({ model: "acct", prompt: prompt(kind), max_tokens: 4 });
        else await client.chat.completions.create({ model: "acct", messages: [{ role: "user", content: prompt(kind) }], max_tokens: 4 });
      });
      expectCharged(did, charged);
    }
  });

  it("the Responses API, streamed and not", async () => {
    for (const stream of [false, true]) {
      let reported: OpenAI.Responses.ResponseUsage | undefined;
      const { did, charged } = await charge(async (client) => {
        if (!stream) {
          reported = (await client.responses.create({ model: "acct", input: prompt("responses"), max_output_tokens: 6 })).usage;
          return;
        }
        for await (const event of await client.responses.create({ model: "acct", input: prompt("responses"), max_output_tokens: 6, stream: true })) {
          if (event.type === "response.completed" || event.type === "response.incomplete") reported = event.response.usage;
        }
      });
      expect(reported?.output_tokens).toBe(6);
      expectCharged(did, charged);
    }
  });

  it("a long streamed Responses answer: its closing event repeats the whole output before the usage", async () => {
    // 6,000 tokens: response.completed is ~30 KiB, past what the tail kept for a short request.
    let reported: OpenAI.Responses.ResponseUsage | undefined;
    const { did, charged } = await charge(async (client) => {
      for await (const event of await client.responses.create({ model: "acct", input: prompt("responses"), max_output_tokens: 6000, stream: true })) {
        if (event.type === "response.completed" || event.type === "response.incomplete") reported = event.response.usage;
      }
    });
    expect(reported?.output_tokens).toBe(did.completion);
    expect(did.completion).toBeGreaterThan(4400);
    expectCharged(did, charged);
  });

  it("embeddings: prompt tokens only", async () => {
    const { did, charged } = await charge(async (client) => {
      await client.embeddings.create({ model: "acct", input: [prompt("a"), prompt("b")] });
    });
    expect(did.prompt).toBeGreaterThan(0);
    expect(charged.completion_tokens).toBe(0);
    expectCharged(did, charged);
  });

  it("rerank and score", async () => {
    for (const path of ["/rerank", "/score"]) {
      const body = path === "/rerank" ? { model: "acct", query: "which?", documents: [prompt("x"), prompt("y")] } : { model: "acct", text_1: "which?", text_2: [prompt("x"), prompt("y")] };
      const { did, charged } = await charge(async (client) => {
        const res = await client.post(path, { body });
        expect(res).toBeTruthy();
      });
      expect(did.prompt).toBeGreaterThan(0);
      expectCharged(did, charged);
    }
  });
});

describe("where the upstream puts its usage", () => {
  it("a Responses stream whose server echoes long instructions after its usage (SGLang) is charged that usage, not an estimate", async () => {
    const { id, key } = await createKey();
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    // A 40 KiB system prompt: SGLang repeats it in response.completed, after the usage.
    const instructions = "Follow the house style. ".repeat(1700);
    let reported: OpenAI.Responses.ResponseUsage | undefined;
    for await (const event of await client.responses.create({ model: "acct-sglang-responses", instructions, input: "hi", stream: true })) {
      if (event.type === "response.completed") reported = event.response.usage;
    }
    expect(reported).toMatchObject({ input_tokens: 5, output_tokens: 1 });
    const charged = await chargedOnce(id);
    expect([charged.prompt_tokens, charged.completion_tokens]).toEqual([5, 1]);
  });
});

describe("usage a client wrote into its own request", () => {
  // A tool's JSON schema, metadata, a response format's schema: objects the client writes, which a
  // server may repeat in its closing event after the usage it counted (SGLang does). A key read
  // its usage from the last "usage" object of the stream's end, so it could be charged what it wrote.
  it("a tool whose schema holds a usage object of zeros is charged what the server counted, not what it wrote", async () => {
    const { id, key } = await createKey();
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const tools: OpenAI.Responses.Tool[] = [
      { type: "function", name: "lookup", strict: false, parameters: { type: "object", properties: {}, usage: { input_tokens: 0, output_tokens: 0, total_tokens: 0 } } },
    ];
    for await (const _ of await client.responses.create({ model: "acct-sglang-responses", input: "hi", tools, stream: true }));
    const charged = await chargedOnce(id);
    expect([charged.prompt_tokens, charged.completion_tokens]).toEqual([5, 1]);
  });
});

describe("the usage the gateway asks for and the client did not", () => {
  it("a stream its backend broke off after events carrying their usage so far (continuous_usage_stats) is not charged", async () => {
    const { id, key } = await createKey();
    const prompted = async () => sampleSum(await metricsText(gw.url, adminKey), "kvgate_prompt_tokens_total", { group: "acct-cut" });
    const promptedBefore = await prompted();
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: "acct-cut", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } } as OpenAI.ChatCompletionCreateParamsStreaming);
    const seen: number[] = [];
    await expect(
      (async () => {
        for await (const chunk of stream) if (chunk.usage) seen.push(chunk.usage.completion_tokens);
      })(),
    ).rejects.toThrow(/upstream|broke/i);
    expect(seen).toEqual([1, 2]);
    // The same key's next request is served: its usage alone is what the key was charged.
    const { did, charged } = await (async () => {
      const before = await fleetTokens();
      await client.chat.completions.create({ model: "acct", messages: [{ role: "user", content: prompt("after the cut") }], max_tokens: 3 });
      const charged = await chargedOnce(id);
      const after = await fleetTokens();
      return { did: { prompt: after.prompt - before.prompt, cached: after.cached - before.cached, completion: after.completion - before.completion }, charged };
    })();
    expectCharged(did, charged);
    // The backend did that work all the same: its own token counters have it.
    expect((await prompted()) - promptedBefore).toBe(50);
  });

  it("a client that asked vLLM's continuous_usage_stats without include_usage gets no usage on its chunks, as from vLLM itself, and is charged once", async () => {
    const { id, key } = await createKey();
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    // vLLM reads continuous_usage_stats only with include_usage: alone, it sends no usage at all.
    const stream_options = { continuous_usage_stats: true } as OpenAI.ChatCompletionStreamOptions;
    const withUsage: unknown[] = [];
    let chunks = 0;
    for await (const chunk of await client.chat.completions.create({ model: "acct-vllm", messages: [{ role: "user", content: "hello" }], stream: true, stream_options })) {
      chunks++;
      if (chunk.usage) withUsage.push(chunk.usage);
    }
    expect(chunks).toBe(3);
    expect(withUsage).toEqual([]);
    const charged = await chargedOnce(id);
    expect([charged.prompt_tokens, charged.completion_tokens]).toEqual([11, 2]);
  });
});
