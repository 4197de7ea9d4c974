import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A deployment's `schedulingPolicy: "priority"` (issue 14): the gateway sets each generation's
 * `priority` and a server that orders its queue by it (the simulator as vLLM with
 * `--scheduling-policy priority`) admits a short prompt before a long cold one that came first.
 * Through the bundled gateway on a real socket, to simulated workers that run one sequence at a
 * time (max-num-seqs 1) so that requests queue; a first-come-first-served worker beside it, to
 * show the order is the policy's.
 */

const MODEL = "kvgate-sim";
let priority: Fleet;
let fcfs: Fleet;
let gw: TestGateway;
let client: OpenAI;

beforeAll(async () => {
  // The A100's latencies at a twentieth: a queue, but a short one.
  const engine = { workers: 1, basePort: 0, preset: "a100-7b", timeScale: 0.05, maxNumSeqs: 1, servedModelName: MODEL } as const;
  priority = await startFleet({ ...engine, schedulingPolicy: "priority" });
  fcfs = await startFleet(engine);
  gw = await startTestGateway({
    modelGroups: [
      { name: "ordered", deployments: [{ id: "ordered-0", baseUrl: priority.urls[0] as string, model: MODEL, schedulingPolicy: "priority" }] },
      { name: "in-turn", deployments: [{ id: "in-turn-0", baseUrl: fcfs.urls[0] as string, model: MODEL }] },
    ],
  });
  client = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await gw?.close();
  await Promise.all([priority?.close(), fcfs?.close()]);
});

/** The chat requests a fleet's worker received, in order, with their bodies. */
const received = (fleet: Fleet) => fleet.requests(0).filter((r) => r.path === "/v1/chat/completions").map((r) => r.body as Record<string, unknown>);

/** Paced by the worker: each answer takes `tokens` × 30 ms once admitted, holding the worker's one seat. */
const paced = (tokens: number) => ({ kvgate_sim: { tokens, chunk_delay_ms: 30 } });

/**
 * A request holds the worker; a long cold prompt, then a short one, queue behind it (each sent
 * once the one before it reached the worker). Which of the two finished first.
 */
async function queueOrder(group: string, fleet: Fleet): Promise<string[]> {
  const done: string[] = [];
  const send = (name: string, content: string, tokens: number) =>
    client.chat.completions.create({ model: group, messages: [{ role: "user", content }], max_tokens: tokens, ...paced(tokens) } as OpenAI.ChatCompletionCreateParamsNonStreaming).then((r) => {
      done.push(name);
      return r;
    });
  const before = received(fleet).length;
  const arrived = (n: number) => vi.waitFor(() => expect(received(fleet).length).toBe(before + n), EVENTUALLY);
  // 3 s on the worker's one seat: both others must queue behind it however slow the machine is
  // (with 0.3 s, the long prompt was sometimes admitted alone before the short one arrived).
  const holder = send("holder", "hold the worker", 100);
  await arrived(1);
  // ~3,200 tokens of a document nothing has cached, against a few words.
  const long = send("long", "a page of a long document. ".repeat(480), 3);
  await arrived(2);
  const short = send("short", "a short question?", 3);
  await arrived(3);
  // Both queued while the holder held the seat: the order that follows is the server's choice.
  expect(done, "the holder had finished before both others queued: the order would not be the policy's").toEqual([]);
  await Promise.all([holder, long, short]);
  return done;
}

describe("a deployment whose server orders its queue by priority", () => {
  it("gets a short prompt served before a long cold one that arrived first; a first-come-first-served server serves them in turn", async () => {
    expect(await queueOrder("ordered", priority)).toEqual(["holder", "short", "long"]);
    expect(await queueOrder("in-turn", fcfs)).toEqual(["holder", "long", "short"]);
  });

  it("carries the gateway's priority on every generation, in place of a client's own, and none to a first-come-first-served server", async () => {
    const from = Date.now();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      // A client asking to go first: on a server kvgate orders, its place is kvgate's to give.
      body: JSON.stringify({ model: "ordered", messages: [{ role: "user", content: "me first" }], max_tokens: 1, priority: -1_000_000 }),
    });
    expect(res.status).toBe(200);
    await res.text();
    const sent = received(priority).at(-1)?.priority;
    // Milliseconds since the epoch: the request's arrival, plus its few blocks' prefill.
    expect(Number.isSafeInteger(sent)).toBe(true);
    expect(sent).toBeGreaterThanOrEqual(from);
    expect(sent).toBeLessThan(Date.now() + 1000);

    const completion = await client.completions.create({ model: "ordered", prompt: "a text completion", max_tokens: 1 });
    expect(completion.choices).toHaveLength(1);
    expect(priority.requests(0).at(-1)?.body).toMatchObject({ priority: expect.any(Number) as number });

    await client.chat.completions.create({ model: "in-turn", messages: [{ role: "user", content: "in turn" }], max_tokens: 1 });
    expect(received(fcfs).at(-1)).not.toHaveProperty("priority");
  });
  it("gives a request with a 1 MB image the priority of the tokens a VLM spends on an image, not of its base64 read as text", async () => {
    // A local photo as the openai SDK's docs send one: a base64 data URL, ~1 MB.
    let state = 12345;
    const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const base64 = Array.from({ length: 1_000_000 }, () => digits[(state = (Math.imul(state, 1664525) + 1013904223) >>> 0) >>> 26]).join("");
    const content: OpenAI.ChatCompletionContentPart[] = [
      { type: "text", text: "What is in this image?" },
      { type: "image_url", image_url: { url: `data:image/jpeg;base64,${base64}` } },
    ];
    // The simulated engine reads the base64 as text, and may refuse it as too long: what it was sent is what counts here.
    await client.chat.completions.create({ model: "ordered", messages: [{ role: "user", content }], max_tokens: 1 }).catch(() => null);
    const sent = priority.requests(0).findLast((r) => r.path === "/v1/chat/completions");
    expect(sent?.body).toMatchObject({ messages: [{ content: [{ type: "text" }, { type: "image_url" }] }] });
    const routedAt = Number(sent?.headers["x-kvgate-routed-at"]);
    // Its place in the queue past its arrival: its prefill at the deployment's rate. A VLM spends
    // ~1-2k tokens on an image; read as text, the base64 was ~250k tokens, 25 s behind every text prompt.
    const behind = ((sent?.body as Record<string, unknown>).priority as number) - routedAt;
    expect(behind).toBeGreaterThanOrEqual(0);
    expect(behind).toBeLessThan(2_000);
  });
  it("gives a request with images by URL the priority of the images the engine fetches, as if they came inline (found by review: 20 URLs went as ~24 blocks, ahead of others' 2k-token prompts)", async () => {
    const content: OpenAI.ChatCompletionContentPart[] = [
      { type: "text", text: "Describe these." },
      ...Array.from({ length: 20 }, (_, i): OpenAI.ChatCompletionContentPartImage => ({ type: "image_url", image_url: { url: `https://cdn.example.com/p${i}.png` } })),
    ];
    await client.chat.completions.create({ model: "ordered", messages: [{ role: "user", content }], max_tokens: 1 }).catch(() => null);
    const sent = priority.requests(0).findLast((r) => r.path === "/v1/chat/completions");
    // The URLs went as they came: the engine fetches them.
    expect(sent?.body).toMatchObject({ messages: [{ content }] });
    // 20 images of 1,024 tokens at the deployment's 10,000 tokens/s: ~2 s past its arrival, as inline.
    const behind = ((sent?.body as Record<string, unknown>).priority as number) - Number(sent?.headers["x-kvgate-routed-at"]);
    expect(behind).toBeGreaterThanOrEqual(1_900);
    expect(behind).toBeLessThan(2_500);
  });
  it("gives a request the priority of the documents its template renders, not of its messages alone (found by review: 1.2 MB of documents beside 'hi' went as 1 block)", async () => {
    // vLLM's `documents` (Command-R's and Granite's RAG templates render them): 200 KB, ~50k tokens.
    const documents = [{ title: "manual", text: "a page of a long manual. ".repeat(8_000) }];
    await client.chat.completions.create({ model: "ordered", messages: [{ role: "user", content: "hi" }], max_tokens: 1, documents } as OpenAI.ChatCompletionCreateParamsNonStreaming).catch(() => null);
    const sent = priority.requests(0).findLast((r) => r.path === "/v1/chat/completions");
    expect(sent?.body).toMatchObject({ documents });
    // 50k tokens at the deployment's 10,000 tokens/s: ~5 s past its arrival.
    const behind = ((sent?.body as Record<string, unknown>).priority as number) - Number(sent?.headers["x-kvgate-routed-at"]);
    expect(behind).toBeGreaterThanOrEqual(4_500);
  });
  it("carries the gateway's priority, never a client's, on every endpoint to a priority server: Responses, embeddings, rerank and score too", async () => {
    // A client's priority of -1e15 would jump every request of every tenant; without one, a
    // request goes at vLLM's default 0, before every value the gateway sets.
    const asks: [string, Record<string, unknown>][] = [
      ["/v1/responses", { input: "me first", max_output_tokens: 1 }],
      ["/v1/embeddings", { input: "me first" }],
      ["/v1/rerank", { query: "me first", documents: ["a", "b"] }],
      ["/v1/score", { text_1: "me first", text_2: ["a"] }],
    ];
    for (const [path, ask] of asks) {
      const from = Date.now();
      const res = await fetch(`${gw.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "ordered", ...ask, priority: -1e15 }),
      });
      expect([path, res.status]).toEqual([path, 200]);
      await res.text();
      const sent = (priority.requests(0).findLast((r) => r.path === path)?.body as Record<string, unknown> | undefined)?.priority;
      expect([path, Number.isSafeInteger(sent)]).toEqual([path, true]);
      expect(sent).toBeGreaterThanOrEqual(from);
      expect(sent).toBeLessThan(Date.now() + 1000);
    }
  });
});
