import { describe, expect, it } from "vitest";
import { postJson, type ErrorBody } from "../../bench/fleet/sim-client.ts";
import { useFleets } from "../support/fleets.ts";

const fleetOf = useFleets();

interface EmbeddingsBody {
  object: string;
  model: string;
  data: { index: number; object: string; embedding: number[] | string }[];
  usage: { prompt_tokens: number; total_tokens: number };
}
interface RerankBody {
  id: string;
  model: string;
  results: { index: number; document: { text: string }; relevance_score: number }[];
  usage: { prompt_tokens: number; total_tokens: number };
}
interface ScoreBody {
  object: string;
  data: { index: number; object: string; score: number }[];
  usage: { prompt_tokens: number };
}

const model = "kvgate-sim";
const norm = (v: readonly number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const cosine = (a: readonly number[], b: readonly number[]) => a.reduce((s, x, i) => s + x * (b[i] ?? 0), 0) / (norm(a) * norm(b));
const floats = (base64: string) => Array.from(new Float32Array(new Uint8Array(Buffer.from(base64, "base64")).buffer));

describe("POST /v1/embeddings", () => {
  it("answers unit vectors of the configured length, the same on every worker, nearer for texts that share words", async () => {
    const fleet = await fleetOf({ workers: 2, embeddingDimensions: 96 });
    const input = ["the red apple fell", "a red apple fell down", "quarterly tax filings"];
    const [a, b] = await Promise.all(fleet.urls.map((u) => postJson(`${u}/v1/embeddings`, { model, input })));
    expect(a?.status).toBe(200);
    const body = a?.json as EmbeddingsBody;
    expect(body).toMatchObject({ object: "list", model });
    expect(body.data.map((d) => [d.index, d.object])).toEqual([
      [0, "embedding"],
      [1, "embedding"],
      [2, "embedding"],
    ]);
    const vectors = body.data.map((d) => d.embedding as number[]);
    for (const v of vectors) {
      expect(v).toHaveLength(96);
      expect(norm(v)).toBeCloseTo(1, 5);
    }
    expect((b?.json as EmbeddingsBody).data).toEqual(body.data);
    expect(cosine(vectors[0] ?? [], vectors[1] ?? [])).toBeGreaterThan(cosine(vectors[0] ?? [], vectors[2] ?? []) + 0.3);
    expect(body.usage.prompt_tokens).toBe(input.reduce((n, t) => n + Math.ceil(t.length / 4), 0));
  });

  it("encodes base64 as the vector's little-endian float32 bytes, and cuts a vector to `dimensions` as a Matryoshka model does", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const url = `${fleet.urls[0]}/v1/embeddings`;
    const plain = (await postJson(url, { model, input: "hello world" })).json as EmbeddingsBody;
    const encoded = (await postJson(url, { model, input: "hello world", encoding_format: "base64" })).json as EmbeddingsBody;
    expect(floats(encoded.data[0]?.embedding as string)).toEqual(plain.data[0]?.embedding);
    const cut = ((await postJson(url, { model, input: "hello world", dimensions: 8 })).json as EmbeddingsBody).data[0]?.embedding as number[];
    expect(cut).toHaveLength(8);
    expect(norm(cut)).toBeCloseTo(1, 5);
    const head = (plain.data[0]?.embedding as number[]).slice(0, 8);
    expect(cosine(cut, head)).toBeCloseTo(1, 5);
  });

  it("embeds token ids and lists of them, and vLLM's chat-style messages as one input", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const url = `${fleet.urls[0]}/v1/embeddings`;
    const r = await postJson(url, { model, input: [[1, 2, 3], [4]] });
    expect((r.json as EmbeddingsBody).data).toHaveLength(2);
    expect((r.json as EmbeddingsBody).usage.prompt_tokens).toBe(4);
    const chat = (await postJson(url, { model, messages: [{ role: "user", content: "hello" }] })).json as EmbeddingsBody;
    expect(chat.data).toHaveLength(1);
    expect(norm(chat.data[0]?.embedding as number[])).toBeCloseTo(1, 5);
  });

  it.each([
    [{ model }, "input must be"],
    [{ model, input: [{}] }, "input must be"],
    [{ model, input: "x", dimensions: 385 }, "dimensions must be an integer from 1 to 384"],
    [{ model, input: "x", encoding_format: "bytes" }, 'encoding_format must be "float" or "base64"'],
    [{ model, input: "x".repeat(500) }, "maximum context length is 100 tokens"],
  ])("answers vLLM's 400 for %j", async (body, message) => {
    const fleet = await fleetOf({ workers: 1, maxModelLen: 100 });
    const r = await postJson(`${fleet.urls[0]}/v1/embeddings`, body);
    expect(r.status).toBe(400);
    expect((r.json as ErrorBody).error).toMatchObject({ code: 400, type: "BadRequestError", message: expect.stringContaining(message) });
  });

  it("takes the prefill time of its tokens on a GPU preset", async () => {
    const fleet = await fleetOf({ workers: 1, preset: "a100-7b", prefillBaseMs: 60 });
    const started = performance.now();
    expect((await postJson(`${fleet.urls[0]}/v1/embeddings`, { model, input: "x" })).status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(55);
  });

  it("obeys the test controls and the model check like a generation", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const url = `${fleet.urls[0]}/v1/embeddings`;
    expect((await postJson(url, { model, input: "x", kvgate_sim: { fail_status: 503 } })).status).toBe(503);
    expect((await postJson(url, { model: "other", input: "x" })).status).toBe(404);
    await expect(postJson(url, { model, input: "x", kvgate_sim: { fail_after_chunks: 0 } })).rejects.toThrow();
    expect(fleet.requests(0).map((r) => r.path)).toEqual(["/v1/embeddings", "/v1/embeddings", "/v1/embeddings"]);
  });
});

describe("rerank and score", () => {
  const documents = ["Paris is the capital of France.", "Bananas are yellow.", "Berlin is the capital of Germany."];
  const query = "What is the capital of France?";

  it.each(["/rerank", "/v1/rerank", "/v2/rerank"])("POST %s ranks the documents by relevance, top_n of them, in vLLM's shape", async (path) => {
    const fleet = await fleetOf({ workers: 1 });
    const r = await postJson(`${fleet.urls[0]}${path}`, { model, query, documents, top_n: 2 });
    expect(r.status).toBe(200);
    const body = r.json as RerankBody;
    expect(body.id).toMatch(/^rerank-/);
    expect(body.model).toBe(model);
    expect(body.results.map((x) => x.index)).toEqual([0, 2]);
    expect(body.results.map((x) => x.document.text)).toEqual([documents[0], documents[2]]);
    const [first, second] = body.results.map((x) => x.relevance_score);
    expect(first).toBeGreaterThan(second ?? 1);
    for (const s of [first, second]) {
      expect(s).toBeGreaterThan(0);
      expect(s).toBeLessThan(1);
    }
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens);
    const all = (await postJson(`${fleet.urls[0]}${path}`, { model, query, documents })).json as RerankBody;
    expect(all.results).toHaveLength(3);
    expect(all.results.at(-1)?.index).toBe(1);
  });

  it.each(["/score", "/v1/score"])("POST %s scores 1:1, 1:N and N:N pairs in vLLM's shape", async (path) => {
    const fleet = await fleetOf({ workers: 1 });
    const url = `${fleet.urls[0]}${path}`;
    const oneToMany = (await postJson(url, { model, text_1: query, text_2: documents })).json as ScoreBody;
    expect(oneToMany.object).toBe("list");
    expect(oneToMany.data.map((d) => [d.index, d.object])).toEqual([
      [0, "score"],
      [1, "score"],
      [2, "score"],
    ]);
    const rerank = (await postJson(`${fleet.urls[0]}/rerank`, { model, query, documents })).json as RerankBody;
    // The same model behind both: a pair scores alike through either API.
    for (const r of rerank.results) expect(oneToMany.data[r.index]?.score).toBe(r.relevance_score);
    const oneToOne = (await postJson(url, { model, text_1: query, text_2: documents[0] })).json as ScoreBody;
    expect(oneToOne.data.map((d) => d.score)).toEqual([oneToMany.data[0]?.score]);
    const pairs = (await postJson(url, { model, queries: [query, "yellow fruit"], documents: [documents[0], documents[1]] })).json as ScoreBody;
    expect(pairs.data).toHaveLength(2);
  });

  it("POST /v1/score takes SGLang's token ids: a query of ids against items that are lists of ids", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const r = await postJson(`${fleet.urls[0]}/v1/score`, { model, query: [791, 6864, 315], items: [[12366], [7295, 11]] });
    expect(r.status).toBe(200);
    const body = r.json as ScoreBody;
    expect(body.data.map((d) => d.index)).toEqual([0, 1]);
    // Each pair reads the query's 3 ids and the item's own.
    expect(body.usage.prompt_tokens).toBe(3 + 1 + 3 + 2);
  });

  it.each([
    ["/rerank", { model, documents: ["a"] }, "query must be a string"],
    ["/rerank", { model, query: "q", documents: ["a"], top_n: -1 }, "top_n must be an integer"],
    ["/score", { model, text_1: "q" }, "text_1 and text_2 are required"],
    ["/score", { model, text_1: ["a", "b"], text_2: ["a", "b", "c"] }, "1:1, 1:N or N:N"],
  ])("POST %s %j: a 400", async (path, body, message) => {
    const fleet = await fleetOf({ workers: 1 });
    const r = await postJson(`${fleet.urls[0]}${path}`, body);
    expect(r.status).toBe(400);
    expect((r.json as ErrorBody).error.message).toContain(message);
  });
});
