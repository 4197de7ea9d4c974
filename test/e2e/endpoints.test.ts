import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { moveFleet, wranglerDevConfig } from "../../bench/harness/dev-config.ts";
import { DEFAULT_FLEET_PORT, MODEL, fleetUrls } from "../../bench/start/options.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * The OpenAI-compatible endpoints beside chat (issue 11, "Endpoints"), through the bundled gateway
 * on a real socket, in front of the simulated fleet: npm start's own config (wrangler.toml's dev
 * config, its deployments moved to this test's fleet) plus a group whose name holds a slash, as
 * Hugging Face model ids do. The official SDK where it has the method, plain fetch elsewhere.
 */

const LLAMA = "meta-llama/Llama-3.1-8B";
/** Three backends that each answer a follow-up they did not store as some vLLM versions do: a 404 naming the id in its message, and no param. */
const UNSTORED = "stores-none";
const GROUPS = [MODEL, LLAMA, UNSTORED];

let fleet: Fleet;
let upstream: HostileUpstream;
let gw: TestGateway;
let client: OpenAI;

beforeAll(async () => {
  fleet = await startFleet({ workers: 4, basePort: 0, preset: "instant", servedModelName: MODEL });
  upstream = await startHostileUpstream();
  const dev = moveFleet(wranglerDevConfig(), fleetUrls(DEFAULT_FLEET_PORT), fleet.urls);
  // Its deployments serve the fleet's model: the gateway rewrites the name it was asked for.
  const llama = { name: LLAMA, aliases: ["llama-8b"], deployments: fleet.urls.slice(0, 2).map((baseUrl, i) => ({ id: `llama-${i}`, baseUrl, model: MODEL })) };
  const unstored = { name: UNSTORED, deployments: ["a", "b", "c"].map((id) => ({ id, baseUrl: `${upstream.url}/response-not-found-unnamed`, model: MODEL })) };
  gw = await startTestGateway({ ...dev, modelGroups: [...dev.modelGroups, llama, unstored] });
  client = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  await upstream?.close();
});

// Every answer, refused or served, left no lease behind.
afterEach(async () => {
  for (const group of GROUPS) await vi.waitFor(async () => expect({ group, inFlight: await gw.inFlight(group) }).toEqual({ group, inFlight: 0 }), EVENTUALLY);
});

interface Reply {
  status: number;
  headers: Headers;
  json: Record<string, unknown>;
}

async function post(path: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${gw.key}` }): Promise<Reply> {
  const res = await fetch(`${gw.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  return { status: res.status, headers: res.headers, json: (await res.json()) as Record<string, unknown> };
}

/** The inference requests the fleet received, in all, and the last one. */
function upstreamRequests(): { count: number; last: { path: string; body: Record<string, unknown> } | undefined } {
  const all = fleet.urls.flatMap((_, i) => fleet.requests(i)).sort((a, b) => a.at - b.at);
  const last = all.at(-1);
  return { count: all.length, last: last && { path: last.path, body: last.body as Record<string, unknown> } };
}

const norm = (v: readonly number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

describe("POST /v1/embeddings", () => {
  it("through the SDK (which asks for base64 and decodes it): unit vectors, the same numbers as the float encoding, routed least-loaded", async () => {
    const { data, response } = await client.embeddings.create({ model: MODEL, input: ["a red apple", "a green apple"] }).withResponse();
    expect(data.object).toBe("list");
    expect(data.data.map((d) => d.index)).toEqual([0, 1]);
    for (const d of data.data) {
      expect(d.embedding).toHaveLength(384);
      expect(norm(d.embedding)).toBeCloseTo(1, 5);
    }
    expect(data.usage.prompt_tokens).toBeGreaterThan(0);
    expect(response.headers.get("x-kvgate-reason")).toBe("least-loaded");
    expect(response.headers.get("x-kvgate-prefix-blocks")).toBe("0/0");
    expect(response.headers.get("x-kvgate-backend")).toMatch(/^sim-\d$/);

    const floats = await client.embeddings.create({ model: MODEL, input: ["a red apple", "a green apple"], encoding_format: "float" });
    expect(floats.data.map((d) => d.embedding)).toEqual(data.data.map((d) => d.embedding));
  });

  it("rewrites the model to the deployment's, passes `dimensions` on, and hands back the upstream's answer as it came", async () => {
    const r = await client.embeddings.create({ model: "llama-8b", input: "short", dimensions: 64 });
    expect(r.data[0]?.embedding).toHaveLength(64);
    expect(norm(r.data[0]?.embedding ?? [])).toBeCloseTo(1, 5);
    // No restamp hook in this config: the answer names the upstream's model, untouched.
    expect(r.model).toBe(MODEL);
    expect(upstreamRequests().last).toMatchObject({ path: "/v1/embeddings", body: { model: MODEL, input: "short", dimensions: 64, encoding_format: "base64" } });
  });

  it("a backend's 5xx is failed over like chat's, and no lease is left behind", async () => {
    const r = await post("/v1/embeddings", { model: LLAMA, input: "x", kvgate_sim: { fail_status: 500 } });
    // Both backends fail the same way: the failure is the request's, passed on as the gateway's 502.
    expect(r.status).toBe(502);
    expect(r.headers.get("x-kvgate-attempts")).toBe("2");
  });

  it("passes on the upstream's own 400 (more dimensions than the model has), and the lease ends with it", async () => {
    const r = await post("/v1/embeddings", { model: MODEL, input: "x", dimensions: 4096 });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ message: expect.stringContaining("dimensions must be an integer from 1 to 384") });
  });
});

describe("POST /v1/responses", () => {
  it("through the SDK: a response object, routed on its input; the next turn goes where its prefix is cached", async () => {
    const instructions = "You are a terse assistant who answers in one line. ".repeat(8);
    const first = await client.responses.create({ model: MODEL, instructions, input: "What is a KV cache?" }).withResponse();
    expect(first.data).toMatchObject({ object: "response", status: "completed", model: MODEL, instructions });
    expect(first.data.output_text.length).toBeGreaterThan(0);
    expect(first.data.usage?.input_tokens).toBeGreaterThan(0);
    const blocks = first.response.headers.get("x-kvgate-prefix-blocks") ?? "";
    expect(blocks).toMatch(/^0\/[1-9]\d*$/);

    // The conversation sent back as items, plus a new question: same backend, and the cache hits.
    const next = await client.responses
      .create({
        model: MODEL,
        instructions,
        input: [
          { role: "user", content: "What is a KV cache?" },
          { role: "assistant", content: first.data.output_text },
          { role: "user", content: [{ type: "input_text", text: "And why does it matter?" }] },
        ],
      })
      .withResponse();
    expect(next.response.headers.get("x-kvgate-reason")).toBe("prefix-hit");
    expect(next.response.headers.get("x-kvgate-backend")).toBe(first.response.headers.get("x-kvgate-backend"));
    expect(next.data.usage?.input_tokens_details.cached_tokens).toBeGreaterThan(0);
  });

  it("through the SDK, streamed: response.created first, the text in deltas, response.completed last with usage", async () => {
    const stream = await client.responses.create({ model: MODEL, input: "Stream me a line.", stream: true });
    const types: string[] = [];
    let text = "";
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.completed") completed = event.response;
    }
    expect(types[0]).toBe("response.created");
    expect(types.at(-1)).toBe("response.completed");
    expect(types.filter((t) => t === "response.output_text.delta")).toHaveLength(16);
    expect(text.length).toBe(16 * 4);
    expect(completed).toMatchObject({ status: "completed", output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }] });
    expect(completed?.usage?.output_tokens).toBe(16);
  });

  it("holds the backend's slot while the stream runs, and gives it back when the client leaves mid-way", async () => {
    const abort = new AbortController();
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, input: "A slow one.", stream: true, kvgate_sim: { chunk_delay_ms: 200, tokens: 50 } }),
      signal: abort.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let text = "";
    while (!text.includes("response.output_text.delta")) text += new TextDecoder().decode((await reader.read()).value);
    expect(await gw.inFlight(MODEL)).toBe(1);
    abort.abort();
    // afterEach waits for it to reach 0.
  });

  it("the SDK's stream helper assembles the same response from the events", async () => {
    const final = await client.responses.stream({ model: LLAMA, input: "Say something.", max_output_tokens: 5 }).finalResponse();
    // Cut at its limit, as OpenAI reports it.
    expect(final).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" } });
    expect(final.output_text).toHaveLength(5 * 4);
    expect(upstreamRequests().last).toMatchObject({ path: "/v1/responses", body: { model: MODEL, stream: true } });
  });
});

describe("an empty previous_response_id", () => {
  it("is a 400 at the edge naming it: no backend is asked (each would answer that response '' is not stored, a 404 that reads as an endpoint none serves)", async () => {
    const before = upstream.stats("response-not-found-unnamed").requests;
    const err = await client.responses.create({ model: UNSTORED, input: "and then?", previous_response_id: "" }).catch((e: unknown) => e);
    if (!(err instanceof OpenAI.APIError)) throw err;
    expect([err.status, err.param, err.type, err.message]).toEqual([400, "previous_response_id", "invalid_request_error", "400 previous_response_id must have at least 1 character(s)"]);
    expect(upstream.stats("response-not-found-unnamed").requests).toBe(before);
  });
});

describe("GET /v1/models/{id}", () => {
  it("through the SDK: the model object /v1/models lists, for a name with a slash and for an alias", async () => {
    const listed = await client.models.list();
    const llama = await client.models.retrieve(LLAMA);
    expect(llama).toEqual({ id: LLAMA, object: "model", created: 0, owned_by: "kvgate", root: LLAMA });
    expect(listed.data).toContainEqual(llama);
    expect(await client.models.retrieve("llama-8b")).toMatchObject({ id: "llama-8b", root: LLAMA });
    expect(await client.models.retrieve(MODEL)).toMatchObject({ id: MODEL, root: MODEL });
  });

  it("takes the slash as it is, too", async () => {
    const res = await fetch(`${gw.url}/v1/models/${LLAMA}`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: LLAMA, object: "model" });
  });

  it("an unknown id is a 404 model_not_found, which the SDK raises as NotFoundError", async () => {
    const err = await client.models.retrieve("meta-llama/No-Such-Model").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({ code: "model_not_found", message: expect.stringContaining('"meta-llama/No-Such-Model"') });
  });

  it("needs the key", async () => {
    expect((await fetch(`${gw.url}/v1/models/${encodeURIComponent(LLAMA)}`)).status).toBe(401);
  });
});

const DOCUMENTS = ["Paris is the capital of France.", "Bananas are yellow.", "Berlin is the capital of Germany."];

describe("vLLM's rerank and score", () => {
  it.each(["/v1/rerank", "/rerank", "/v2/rerank"])("POST %s: the upstream's ranking, as it answered it, routed least-loaded", async (path) => {
    const body = { model: LLAMA, query: "What is the capital of France?", documents: DOCUMENTS, top_n: 2 };
    const r = await post(path, body);
    expect(r.status).toBe(200);
    expect(r.headers.get("x-kvgate-reason")).toBe("least-loaded");
    const results = r.json.results as { index: number; relevance_score: number; document: { text: string } }[];
    expect(results.map((x) => x.index)).toEqual([0, 2]);
    expect(results[0]?.document.text).toBe(DOCUMENTS[0]);
    expect(r.json.usage).toMatchObject({ total_tokens: expect.any(Number) });
    // What the simulator answers asked directly, score for score.
    const direct = (await (await fetch(`${fleet.urls[0]}/v1/rerank`, { method: "POST", body: JSON.stringify({ ...body, model: MODEL }) })).json()) as Record<string, unknown>;
    expect(r.json.results).toEqual(direct.results);
    expect(upstreamRequests().last).toMatchObject({ path: "/v1/rerank", body: { model: MODEL, query: body.query, top_n: 2 } });
  });

  it.each(["/v1/score", "/score"])("POST %s: a score per pair, text_1 against each of text_2", async (path) => {
    const r = await post(path, { model: MODEL, text_1: "What is the capital of France?", text_2: DOCUMENTS });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ object: "list", model: MODEL });
    const data = r.json.data as { index: number; object: string; score: number }[];
    expect(data.map((d) => [d.index, d.object])).toEqual([
      [0, "score"],
      [1, "score"],
      [2, "score"],
    ]);
    expect(data[0]?.score).toBeGreaterThan(data[1]?.score ?? 1);
    expect(upstreamRequests().last?.path).toBe("/v1/score");
  });

  it("POST /v1/score in SGLang's token-id form (a query tokenised once, items as lists of ids): passed on as it came, and scored", async () => {
    const body = { model: MODEL, query: [791, 6864, 315], items: [[12366], [7295]], label_token_ids: [9642, 2822] };
    const before = upstreamRequests().count;
    const r = await post("/v1/score", body);
    expect([r.status, r.json.error]).toEqual([200, undefined]);
    expect((r.json.data as unknown[]).length).toBe(2);
    expect(upstreamRequests().count).toBe(before + 1);
    expect(upstreamRequests().last).toMatchObject({ path: "/v1/score", body });
  });
});

describe("bad input is refused at the edge, OpenAI-style, and never reaches a backend", () => {
  const cases: [string, string, unknown, { status: number; param?: string | null; code?: string; message?: string }][] = [
    ["/v1/embeddings", "no model", { input: "x" }, { status: 400, param: "model", message: "model is required" }],
    ["/v1/embeddings", "a model that is not a string", { model: 7, input: "x" }, { status: 400, param: "model", message: "model must be a string" }],
    ["/v1/embeddings", "no input", { model: MODEL }, { status: 400, param: "input", message: "input is required" }],
    ["/v1/embeddings", "an input of objects", { model: MODEL, input: [{}] }, { status: 400, param: "input" }],
    ["/v1/embeddings", "a stream asked for", { model: MODEL, input: "x", stream: true }, { status: 400, param: "stream" }],
    ["/v1/embeddings", "an unknown model", { model: "no-such-model", input: "x" }, { status: 404, code: "model_not_found" }],
    ["/v1/responses", "no input", { model: MODEL }, { status: 400, param: "input", message: "input is required" }],
    ["/v1/responses", "an item with neither type nor role", { model: MODEL, input: [{ content: "x" }] }, { status: 400, param: "input[0]", message: "input[0] must have a type or a role" }],
    ["/v1/responses", "more items than limits.maxMessages", { model: MODEL, input: Array.from({ length: 4097 }, () => 0) }, { status: 400, param: "input", message: "input has 4097 items, more than the limit of 4096" }],
    ["/v1/responses", "instructions that are not text", { model: MODEL, input: "x", instructions: ["x"] }, { status: 400, param: "instructions" }],
    ["/v1/responses", "an unknown model", { model: "no-such-model", input: "x" }, { status: 404, code: "model_not_found" }],
    ["/v1/rerank", "no query", { model: MODEL, documents: ["a"] }, { status: 400, param: "query", message: "query is required" }],
    ["/rerank", "documents that are not a list", { model: MODEL, query: "q", documents: "a" }, { status: 400, param: "documents" }],
    ["/v2/rerank", "no model", { query: "q", documents: ["a"] }, { status: 400, param: "model" }],
    ["/score", "one side only", { model: MODEL, text_1: "q" }, { status: 400, param: "text_1", message: "text_1 and text_2 are required (or queries and documents, queries and items, data_1 and data_2, query and items)" }],
    ["/v1/score", "an unknown model", { model: "no-such-model", text_1: "a", text_2: "b" }, { status: 404, code: "model_not_found" }],
    ["/v1/score", "SGLang's query as lists of token ids (it takes one list)", { model: MODEL, query: [[791]], items: [[12366]] }, { status: 400, param: "query" }],
    ["/v1/embeddings", "a body nested past the bound", `{"model":"${MODEL}","input":${"[".repeat(200)}${"]".repeat(200)}}`, { status: 400, param: "input", code: "json_too_deep" }],
    ["/v1/responses", "malformed JSON", `{"model":"${MODEL}","input":`, { status: 400, code: "invalid_json" }],
  ];
  it.each(cases)("POST %s, %s", async (path, _what, body, expected) => {
    const before = upstreamRequests().count;
    const r = await post(path, body);
    expect(r.status).toBe(expected.status);
    const { status: _status, ...fields } = expected;
    expect(r.json.error).toMatchObject({ type: expected.status === 404 ? "not_found_error" : "invalid_request_error", ...fields });
    expect(upstreamRequests().count).toBe(before);
  });

  it.each(["/v1/embeddings", "/v1/responses", "/v1/rerank", "/v1/score", "/rerank", "/v2/rerank", "/score"])("%s: no key, 401; another method, 405 with Allow: POST", async (path) => {
    const anonymous = await post(path, { model: MODEL }, {});
    expect(anonymous.status).toBe(401);
    expect(anonymous.json.error).toMatchObject({ type: "authentication_error" });
    const get = await fetch(`${gw.url}${path}`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(get.status).toBe(405);
    expect(get.headers.get("allow")).toBe("POST");
  });
});
