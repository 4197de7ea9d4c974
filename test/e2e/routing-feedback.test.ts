import { randomBytes } from "node:crypto";
import http from "node:http";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import type { BackendSnapshot } from "../../src/routing/protocol.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Feedback from the engines (issue 14) through the real runtime: the bundled gateway in workerd
 * in front of the fleet simulator, which reports cached tokens as vLLM does. The group's
 * kvCapacityBlocks is 4× the simulator's real cache and feedback.sampleRate 1, so the Worker
 * reads every answer's usage — asking for it on streams whose client did not, and taking it out
 * again — and the routing object learns from it. The official SDK is the client. A second group's
 * engine is scripted: it answers a Responses follow-up as an engine that stores responses does,
 * counting the stored conversation in its usage; a third group sends it follow-ups whose input
 * fills maxPrefixBlocks.
 */

const MODEL = "sim-feedback";
/** The simulator's KV cache per worker, in its 16-token blocks: 4 KB of prompt text a block. */
const ENGINE_BLOCKS = 160;
const CONFIGURED = ENGINE_BLOCKS * 4;
const STORED = "stored-responses";
/** The same storing engine, in a group whose chains are cut at 16 blocks (1 KB of text). */
const STORED_CUT = "stored-responses-cut";
/** What the scripted engine reports of a follow-up: the stored conversation's tokens, nearly all cached. */
const FOLLOW_UP_USAGE = { input_tokens: 3000, input_tokens_details: { cached_tokens: 2990 }, output_tokens: 2, total_tokens: 3002 };
const metricsKey = `sk-metrics-${randomBytes(16).toString("hex")}`;
let fleet: Fleet;
let engine: http.Server;
let gw: TestGateway;
let client: OpenAI;

beforeAll(async () => {
  fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant", kvCapacityBlocks: ENGINE_BLOCKS, servedModelName: MODEL });
  const storedUrl = await startStoringEngine();
  gw = await startTestGateway({
    modelGroups: [
      { name: MODEL, strategy: "prefix-aware", feedback: { sampleRate: 1 }, deployments: [{ id: "sim-0", baseUrl: fleet.urls[0] as string, model: MODEL, kvCapacityBlocks: CONFIGURED }] },
      { name: STORED, strategy: "prefix-aware", feedback: { sampleRate: 1 }, deployments: [{ id: "store-0", baseUrl: storedUrl, model: STORED, kvCapacityBlocks: CONFIGURED }] },
      { name: STORED_CUT, strategy: "prefix-aware", maxPrefixBlocks: 16, feedback: { sampleRate: 1 }, deployments: [{ id: "store-cut-0", baseUrl: storedUrl, model: STORED, kvCapacityBlocks: CONFIGURED }] },
    ],
  }, { KVGATE_METRICS_KEY: metricsKey });
  client = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  engine?.closeAllConnections();
  await new Promise<void>((resolve) => (engine ? engine.close(() => resolve()) : resolve()));
});

/**
 * An engine that stores responses (vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1, SGLang): a fresh
 * request's input counts ~4 characters a token; a follow-up's prompt is the stored conversation
 * and its input, so its usage is FOLLOW_UP_USAGE whatever the input. Its URL.
 */
async function startStoringEngine(): Promise<string> {
  let n = 0;
  engine = http.createServer((req, res) => {
    let raw = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (raw += chunk));
    req.on("end", () => {
      if (req.url !== "/v1/responses") return void res.writeHead(200, { "content-type": "application/json" }).end("{}");
      const body = JSON.parse(raw) as { input: string; previous_response_id?: string | null };
      const usage = body.previous_response_id ? FOLLOW_UP_USAGE : { input_tokens: Math.round(body.input.length / 4), input_tokens_details: { cached_tokens: 0 }, output_tokens: 2, total_tokens: Math.round(body.input.length / 4) + 2 };
      const id = `resp_${++n}`;
      const output = [{ type: "message", id: `msg_${n}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: "ok", annotations: [] }] }];
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id, object: "response", created_at: 1, status: "completed", model: STORED, output, usage }));
    });
  });
  await new Promise<void>((resolve) => engine.listen(0, "127.0.0.1", resolve));
  const address = engine.address();
  if (!address || typeof address === "string") throw new Error("no address");
  return `http://127.0.0.1:${address.port}`;
}

async function backend(group = MODEL): Promise<BackendSnapshot> {
  const b = (await gw.status(group)).backends[0];
  if (!b) throw new Error("the routing object has routed nothing yet");
  return b;
}

/** Releases whose usage reached the routing object (0 before its first request). */
async function usageReports(): Promise<number> {
  return (await gw.status(MODEL)).backends[0]?.learned.reports.usage ?? 0;
}

/** Text of `chars` characters, different for each `seed`: no two sessions share a block by chance. */
function text(seed: number, chars: number): string {
  let out = "";
  for (let i = 0; out.length < chars; i++) out += `s${seed} w${i} lorem ipsum dolor sit amet. `;
  return out.slice(0, chars);
}

/** Seeded. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

describe("feedback from the engine", () => {
  it("a sampled stream whose client did not ask for usage reaches it unchanged: no usage event, every chunk a choice", async () => {
    const before = await usageReports();
    const stream = await client.chat.completions.create({ model: MODEL, max_tokens: 8, stream: true, messages: [{ role: "user", content: text(0, 400) }] });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.length).toBeGreaterThan(1);
    for (const c of chunks) {
      expect(c.usage ?? null).toBeNull();
      expect(c.choices).toHaveLength(1);
    }
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("length");
    // Its usage was read all the same: the routing object got the report.
    await expect.poll(usageReports, EVENTUALLY).toBe(before + 1);
  });

  it("a client that asks for usage still gets it, with the engine's cached tokens", async () => {
    const messages = [{ role: "user" as const, content: text(1, 2000) }];
    await client.chat.completions.create({ model: MODEL, max_tokens: 2, messages });
    const stream = await client.chat.completions.create({ model: MODEL, max_tokens: 2, stream: true, stream_options: { include_usage: true }, messages });
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    expect(usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(400);
  });

  it("learns the engine's capacity from 4× too big, and its characters per token", async () => {
    // Sessions with a shared system prompt and 2.5 KB of their own, coming back in a random
    // order: their working set (~10 × 60 blocks) is several times the engine's cache.
    const r = rng(5);
    const system = { role: "system" as const, content: text(99, 1500) };
    const sessions: OpenAI.ChatCompletionMessageParam[][] = [];
    for (let i = 0; i < 10; i++) sessions.push([system, { role: "user", content: text(100 + i, 2500) }]);
    for (let i = 0; i < 160; i++) {
      const s = sessions[Math.floor(r() * sessions.length)] as OpenAI.ChatCompletionMessageParam[];
      const answer = await client.chat.completions.create({ model: MODEL, max_tokens: 4, messages: s });
      s.push({ role: "assistant", content: answer.choices[0]?.message.content ?? "" }, { role: "user", content: text(1000 + i, 300) });
      if (s.length > 12) s.splice(2, s.length - 2, { role: "user", content: text(5000 + i, 2500) });
    }
    await expect.poll(usageReports, EVENTUALLY).toBeGreaterThanOrEqual(163);
    const b = await backend();
    expect(b.learned.configured.kvCapacityBlocks).toBe(CONFIGURED);
    // Moved toward the engine's real cache (160 of its blocks, about as many hash blocks at ~4
    // characters a token), and the prefix set with it. From above it stops within 2×: a miss
    // votes to shrink only on a match younger than half the set's oldest (kv-capacity.ts), and
    // with ten sessions coming back at random the set's third-newest of five is already older.
    expect(b.learned.kvCapacityBlocks).toBeLessThanOrEqual(ENGINE_BLOCKS * 2);
    expect(b.learned.kvCapacityBlocks).toBeGreaterThanOrEqual(Math.floor(ENGINE_BLOCKS / Math.SQRT2));
    expect(b.prefixCapacity).toBe(b.learned.kvCapacityBlocks);
    expect(b.learned.charsPerToken).toBeGreaterThan(3.5);
    expect(b.learned.charsPerToken).toBeLessThan(4.5);
    // The same figures, as /metrics serves them.
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${metricsKey}` } })).text();
    expect(metrics).toContain(`kvgate_learned_kv_capacity_blocks{group="${MODEL}",backend="sim-0"} ${b.learned.kvCapacityBlocks}\n`);
    expect(metrics).toContain(`kvgate_learned_chars_per_token{group="${MODEL}",backend="sim-0"} ${b.learned.charsPerToken}\n`);
  });

  it("learns no characters per token from answers to prompts with an image, each hashed as a fixed number of blocks (src/prefix/media.ts)", async () => {
    const before = await backend();
    // The simulator reads an image's base64 as text, ~2k tokens for 8 KB: against the image's
    // fixed blocks, each answer alone says ~2 characters a token.
    for (let i = 0; i < 40; i++) {
      const url = `data:image/png;base64,${randomBytes(6000).toString("base64")}`;
      await client.chat.completions.create({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: [{ type: "text", text: `Picture ${i}?` }, { type: "image_url", image_url: { url } }] }] });
    }
    await expect.poll(usageReports, EVENTUALLY).toBeGreaterThanOrEqual(before.learned.reports.usage + 40);
    expect((await backend()).learned.charsPerToken).toBe(before.learned.charsPerToken);
  });

  it("learns nothing from a Responses follow-up's usage, which counts the stored conversation its chain never read", async () => {
    // A fresh turn teaches: its chain is its whole prompt.
    const first = await client.responses.create({ model: STORED, input: text(7, 4000) });
    await expect.poll(async () => (await backend(STORED)).learned.reports.usage, EVENTUALLY).toBe(1);
    const before = await backend(STORED);
    // Each follow-up's chain is its few words; the engine reports 3,000 prompt tokens, 2,990 cached.
    let previous = first.id;
    for (let i = 0; i < 20; i++) previous = (await client.responses.create({ model: STORED, input: `And then? (${i})`, previous_response_id: previous })).id;
    await expect.poll(async () => (await backend(STORED)).usage.prompt, EVENTUALLY).toBe(before.usage.prompt + 20 * FOLLOW_UP_USAGE.input_tokens);
    const after = await backend(STORED);
    // Read as the chain's, 20 of them dragged 4 characters a token to ~1.4.
    expect(after.learned.charsPerToken).toBe(before.learned.charsPerToken);
    expect(after.learned.reports).toEqual(before.learned.reports);
    expect(after.learned.kvCapacityBlocks).toBe(CONFIGURED);
  });
  it("learns nothing from a Responses follow-up whose input fills maxPrefixBlocks, though its chain is cut like a long prompt's (found by review: it fed the capacity learner)", async () => {
    const first = await client.responses.create({ model: STORED_CUT, input: text(8, 4000) });
    await expect.poll(async () => (await backend(STORED_CUT)).learned.reports.usage, EVENTUALLY).toBe(1);
    const before = await backend(STORED_CUT);
    // Each follow-up's input is 2,000 characters, its chain cut at 16 blocks; the engine reports the stored conversation, nearly all cached.
    let previous = first.id;
    for (let i = 0; i < 40; i++) previous = (await client.responses.create({ model: STORED_CUT, input: text(100 + i, 2000), previous_response_id: previous })).id;
    await expect.poll(async () => (await backend(STORED_CUT)).usage.prompt, EVENTUALLY).toBe(before.usage.prompt + 40 * FOLLOW_UP_USAGE.input_tokens);
    const after = await backend(STORED_CUT);
    expect(after.learned.reports).toEqual(before.learned.reports);
    expect(after.learned.capacitySteps).toBe(before.learned.capacitySteps);
    expect(after.learned.kvCapacityBlocks).toBe(CONFIGURED);
  });
});
