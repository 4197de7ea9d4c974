import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { rawPost } from "./client.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Issue 12 through the path a client takes: the bundled gateway in workerd on a real socket, keys
 * made through the admin API, the simulated fleet as the GPUs (its own /metrics counts what it
 * did), the official OpenAI SDK as a client where it has the call.
 */

let fleet: Fleet;
let slow: Fleet;
let upstream: HostileUpstream;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
/** Every virtual key this file was given: none may show up anywhere but in the answer that made it. */
const issued: string[] = [];

const sim = (f: Fleet, i: number) => ({ id: `sim-${i}`, baseUrl: f.urls[i] as string, model: "sim-7b" });
/** A dollar a million tokens, in and out. */
const PRICING = { promptUsdPerMillion: 1, completionUsdPerMillion: 1 };

beforeAll(async () => {
  upstream = await startHostileUpstream();
  fleet = await startFleet({ workers: 3, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  // Streams that take a while: requests that stay in flight.
  slow = await startFleet({ workers: 2, basePort: 0, preset: "instant", decodeStepMs: 10, servedModelName: "sim-7b" });
  gw = await startTestGateway(
    {
      modelGroups: [
        { name: "keys", deployments: [sim(fleet, 0), sim(fleet, 1), sim(fleet, 2)] },
        // Every request sampled for routing's feedback: its usage is read, whatever its key.
        { name: "keys-sampled", feedback: { sampleRate: 1 }, deployments: [sim(fleet, 0), sim(fleet, 1)] },
        // Every second request meets a server that answers 503 first, and fails over to the fleet.
        {
          name: "keys-failover",
          strategy: "round-robin",
          breaker: { consecutiveFailures: 1000, minRequests: 1000 },
          deployments: [{ id: "down", baseUrl: `${upstream.url}/status:503`, model: "sim-7b" }, sim(fleet, 0)],
        },
        // A server that breaks off its answer after the headers, then the fleet.
        {
          name: "keys-cut",
          strategy: "round-robin",
          breaker: { consecutiveFailures: 1000, minRequests: 1000 },
          deployments: [{ id: "cut", baseUrl: `${upstream.url}/cut-body`, model: "sim-7b" }, sim(fleet, 1)],
        },
        { name: "keys-big", deployments: [{ id: "big", baseUrl: `${upstream.url}/big-answer`, model: "sim-7b" }] },
        { name: "keys-usage-first", deployments: [{ id: "usage-first", baseUrl: `${upstream.url}/usage-first:16`, model: "sim-7b" }] },
        { name: "keys-usage-first-chunked", deployments: [{ id: "usage-first-chunked", baseUrl: `${upstream.url}/usage-first-chunked:16`, model: "sim-7b" }] },
        { name: "keys-usage-middle", deployments: [{ id: "usage-middle", baseUrl: `${upstream.url}/usage-middle:16`, model: "sim-7b" }] },
        { name: "keys-usage-middle-sized", deployments: [{ id: "usage-middle-sized", baseUrl: `${upstream.url}/usage-middle-sized:1100`, model: "sim-7b" }] },
        { name: "keys-responses-usage-middle", deployments: [{ id: "responses-usage-middle", baseUrl: `${upstream.url}/responses-usage-middle:64`, model: "sim-7b" }] },
        { name: "keys-total-only", deployments: [{ id: "usage-total-only", baseUrl: `${upstream.url}/usage-total-only:37`, model: "sim-7b" }] },
        // A server that ignores stream_options.include_usage: its streams carry no usage.
        { name: "keys-no-stream-usage", deployments: [{ id: "no-stream-usage", baseUrl: `${upstream.url}/ok`, model: "sim-7b" }] },
        // A server (or a proxy before it) whose whole answers carry no usage: 400 characters of text each.
        { name: "keys-no-usage", deployments: [{ id: "no-usage", baseUrl: `${upstream.url}/no-usage:400`, model: "sim-7b" }] },
        { name: "keys-usage-then-done", deployments: [{ id: "usage-then-done", baseUrl: `${upstream.url}/usage-then-done:1000`, model: "sim-7b" }] },
        {
          name: "keys-absurd",
          strategy: "round-robin",
          pricing: { promptUsdPerMillion: 2, completionUsdPerMillion: 2 },
          deployments: [
            { id: "usage-absurd", baseUrl: `${upstream.url}/usage-absurd`, model: "sim-7b" },
            { id: "ok", baseUrl: `${upstream.url}/ok`, model: "sim-7b" },
          ],
        },
        { name: "keys-slow", deployments: [sim(slow, 0), sim(slow, 1)] },
        { name: "keys-other", deployments: [sim(slow, 0)] },
        // Priced: a key's dollars are counted here.
        { name: "keys-priced", pricing: PRICING, deployments: [sim(fleet, 2)] },
        // Priced, with a server that answers 503 every time, then an unpriced fallback group, then a priced one.
        {
          name: "keys-priced-fallback",
          pricing: PRICING,
          fallbacks: ["keys-other", "keys-priced"],
          breaker: { consecutiveFailures: 1000, minRequests: 1000 },
          deployments: [{ id: "down", baseUrl: `${upstream.url}/status:503`, model: "sim-7b" }],
        },
        // Whole answers whose body stalls after their headers: one that says its length (held whole), and a chunked one before its first byte.
        { name: "keys-stalled-whole", deployments: [{ id: "stalled-whole", baseUrl: `${upstream.url}/stalled-body`, model: "sim-7b" }] },
        { name: "keys-stalled-headers", deployments: [{ id: "stalled-headers", baseUrl: `${upstream.url}/stalled-body:headers`, model: "sim-7b" }] },
        // A server that answers 503 every time, then the slow fleet's group.
        {
          name: "keys-fallback",
          fallbacks: ["keys-slow"],
          breaker: { consecutiveFailures: 1000, minRequests: 1000 },
          deployments: [{ id: "down", baseUrl: `${upstream.url}/status:503`, model: "sim-7b" }],
        },
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey },
  );
});
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  await slow?.close();
  await upstream?.close();
});

interface KeyView {
  id: string;
  key?: string;
  prefix: string;
  status: string;
}

async function admin(method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
}

async function createKey(body: Record<string, unknown>): Promise<{ id: string; key: string }> {
  const res = await admin("POST", "/keys", body);
  expect(res.status).toBe(201);
  const view = (await res.json()) as KeyView;
  issued.push(view.key as string);
  return { id: view.id, key: view.key as string };
}

interface UsageTotals {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  requests: number;
}

async function usage(id: string): Promise<UsageTotals> {
  const res = await admin("GET", `/usage?key=${id}`);
  expect(res.status).toBe(200);
  return (await res.json()) as UsageTotals;
}

function post(key: string, model: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model, max_tokens: 8, messages: [{ role: "user", content: `hello ${randomBytes(4).toString("hex")}` }], ...extra }),
  });
}

/** The fleet's own counters, summed over its workers (GET /metrics). */
async function fleetTokens(f: Fleet): Promise<{ prompt: number; cached: number; completion: number; requests: number }> {
  const sum = { prompt: 0, cached: 0, completion: 0, requests: 0 };
  for (const url of f.urls) {
    const text = await (await fetch(`${url}/metrics`)).text();
    const read = (name: string) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\d+)`, "m").exec(text)?.[1] ?? NaN);
    sum.prompt += read("kvgate_sim_prompt_tokens_total");
    sum.cached += read("kvgate_sim_cached_tokens_total");
    sum.completion += read("kvgate_sim_generation_tokens_total");
    sum.requests += read("kvgate_sim_requests_total");
  }
  return sum;
}

/** A 1,000-token stream through the `openai` SDK: the events that carried choices, and the usage event if one came. */
async function longStream(key: string, content: string, includeUsage: boolean): Promise<{ events: number; usage: OpenAI.CompletionUsage | null }> {
  const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  let events = 0;
  let usage: OpenAI.CompletionUsage | null = null;
  const stream = await client.chat.completions.create({ model: "keys", messages: [{ role: "user", content }], max_tokens: 1000, stream: true, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) });
  for await (const chunk of stream) {
    if (chunk.choices.length > 0) events++;
    if (chunk.usage) usage = chunk.usage;
  }
  return { events, usage };
}

/**
 * The key made one request, in `group`, charged an estimate: a prompt of 400 characters at 4 a
 * token (and the few of the body's other strings: model, role), and `completion` tokens.
 */
async function expectOneEstimate(id: string, group: string, completion: number): Promise<void> {
  await vi.waitFor(async () => expect({ group, requests: (await usage(id)).requests }).toEqual({ group, requests: 1 }), EVENTUALLY);
  const u = await usage(id);
  expect(u.completion_tokens).toBe(completion);
  expect(u.prompt_tokens).toBeGreaterThanOrEqual(100);
  expect(u.prompt_tokens).toBeLessThan(110);
  const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${adminKey}` } })).text();
  // The sample a whole line: "} 1" alone would match "} 10" too.
  expect(metrics).toContain(`\nkvgate_key_estimated_requests_total{group="${group}",key="${id}"} 1\n`);
}

async function errorOf(res: Response): Promise<{ code: string; type: string; message: string }> {
  return ((await res.json()) as { error: { code: string; type: string; message: string } }).error;
}

describe("usage", () => {
  it("equals what the fleet reports, token for token, over streamed, non-streamed and failed-over requests", async () => {
    const { id, key } = await createKey({ name: "exact" });
    const before = await fleetTokens(fleet);
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const system = "You are a careful assistant. ".repeat(20);
    let sent = 0;
    let failedOver = 0;
    for (let i = 0; i < 6; i++) {
      for (const model of ["keys", "keys-failover"]) {
        const messages = [
          { role: "system" as const, content: system },
          { role: "user" as const, content: `question ${i} on ${model}` },
        ];
        // Not asked for usage: the stream the client gets has no usage event, and ends with [DONE].
        const plain = await post(key, model, { stream: true, messages });
        expect(plain.status).toBe(200);
        if (plain.headers.get("x-kvgate-attempts") === "2") failedOver++;
        const text = await plain.text();
        expect(text).not.toContain('"usage":{');
        expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
        // Asked for it: the SDK sees it.
        let seen: OpenAI.CompletionUsage | null | undefined = null;
        for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 8, stream: true, stream_options: { include_usage: true } })) {
          if (chunk.usage) seen = chunk.usage;
        }
        expect(seen?.prompt_tokens).toBeGreaterThan(0);
        const whole = await client.chat.completions.create({ model, messages, max_tokens: 5 });
        expect(whole.usage?.completion_tokens).toBe(5);
        sent += 3;
      }
    }
    expect(failedOver).toBeGreaterThan(0);
    const after = await fleetTokens(fleet);
    const want = { prompt_tokens: after.prompt - before.prompt, completion_tokens: after.completion - before.completion, cached_tokens: after.cached - before.cached, requests: sent };
    expect(want.cached_tokens).toBeGreaterThan(0);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(sent), EVENTUALLY);
    const got = await usage(id);
    expect({ prompt_tokens: got.prompt_tokens, completion_tokens: got.completion_tokens, cached_tokens: got.cached_tokens, requests: got.requests }).toEqual(want);
  });

  // In a group that samples every request for routing's feedback, the usage is read all the same: it teaches routing, and is not the key's.
  it.each(["keys", "keys-sampled"])("records none for a key with track_usage false and no token limit or budget (its rpm needs none) in %s: its requests leave no usage rows, and count in kvgate_key_requests_total", async (model) => {
    const untracked = await createKey({ name: "untracked", track_usage: false, rpm: 1000 });
    const tracked = await createKey({ name: "tracked, after it" });
    const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 }).chat.completions;
    const body = { model, messages: [{ role: "user" as const, content: "untracked?" }], max_tokens: 3 };
    expect((await client(untracked.key).create(body)).choices[0]?.message.content).toBeTruthy();
    let events = 0;
    for await (const _ of await client(untracked.key).create({ ...body, stream: true })) events++;
    expect(events).toBeGreaterThan(0);
    // The tracked key's request ends after them, in the same group: once it is recorded, theirs were sent too, were they any.
    await client(tracked.key).create(body);
    await vi.waitFor(async () => expect((await usage(tracked.id)).requests).toBe(1), EVENTUALLY);
    expect(await usage(untracked.id)).toMatchObject({ requests: 0, prompt_tokens: 0, completion_tokens: 0 });
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${adminKey}` } })).text();
    expect(metrics).toContain(`\nkvgate_key_requests_total{group="${model}",key="${untracked.id}"} 2\n`);
    expect(metrics).not.toMatch(new RegExp(`^kvgate_key_\\w+_tokens_total\\{group="${model}",key="${untracked.id}"\\} [1-9]`, "m"));
  });

  it("counts a long stream whose client asked for its usage: read from a copy of the body in batches, every event passed on", async () => {
    const { id, key } = await createKey({ name: "long" });
    // ~1,000 events, well past one 16 KiB read of the tap and its 8 KiB tail.
    const { events, usage: seen } = await longStream(key, "a long answer", true);
    expect(seen?.completion_tokens).toBe(1000);
    expect(events).toBeGreaterThanOrEqual(1000);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    const got = await usage(id);
    expect([got.prompt_tokens, got.completion_tokens, got.cached_tokens]).toEqual([seen?.prompt_tokens, 1000, seen?.prompt_tokens_details?.cached_tokens ?? 0]);
  });

  it("counts a long stream whose client did not ask for its usage: the event taken out, every other event passed on", async () => {
    const { id, key } = await createKey({ name: "long-stripped" });
    const { events, usage: seen } = await longStream(key, "a long answer, stripped", false);
    expect(seen).toBeNull();
    expect(events).toBeGreaterThanOrEqual(1000);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    const got = await usage(id);
    expect(got.completion_tokens).toBe(1000);
    expect(got.prompt_tokens).toBeGreaterThan(0);
  });

  it("counts a stream whose client left after its usage event as a request, with its tokens, whether the client asked for the event or not", async () => {
    for (const asked of [true, false]) {
      const { id, key } = await createKey({});
      const res = await post(key, "keys-usage-then-done", { stream: true, ...(asked ? { stream_options: { include_usage: true } } : {}) });
      expect(res.status).toBe(200);
      // The answer's last event and its usage came in one write; its [DONE] comes a second later.
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let text = "";
      while (!text.includes(asked ? '"usage":{' : '"finish_reason":"stop"')) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the stream ended before the client left: ${text}`);
        text += new TextDecoder().decode(value);
      }
      await reader.cancel();
      await vi.waitFor(async () => expect((await usage(id)).completion_tokens).toBe(2), EVENTUALLY);
      const u = await usage(id);
      expect({ asked, tokens: [u.prompt_tokens, u.completion_tokens], requests: u.requests }).toEqual({ asked, tokens: [3, 2], requests: 1 });
    }
  });

  it("charges an estimate for a stream whose server reported no usage (one that ignores stream_options.include_usage)", async () => {
    const { id, key } = await createKey({});
    const content = "x".repeat(400);
    const res = await post(key, "keys-no-stream-usage", { stream: true, messages: [{ role: "user", content }] });
    expect(res.status).toBe(200);
    const text = await res.text();
    // Two tokens and [DONE]: three events.
    expect(text.match(/\n\n/g)).toHaveLength(3);
    await expectOneEstimate(id, "keys-no-stream-usage", 3);
  });

  it("charges a whole answer that reported no usage its generated text at the prompt's characters per token, as the completion", async () => {
    const asked = [
      { path: "/v1/chat/completions", body: { messages: [{ role: "user", content: "x".repeat(400) }] } },
      { path: "/v1/completions", body: { prompt: "x".repeat(400) } },
      { path: "/v1/responses", body: { input: "x".repeat(400) } },
    ];
    for (const { path, body } of asked) {
      const { id, key } = await createKey({});
      const res = await fetch(`${gw.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "keys-no-usage", max_tokens: 200, ...body }),
      });
      expect(res.status, await res.clone().text()).toBe(200);
      expect(JSON.stringify(await res.json())).toContain("y".repeat(400));
      await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
      const u = await usage(id);
      // The answer's 400 characters at 4 a token (the backend never reported a usage to learn its own from).
      expect([path, u.completion_tokens]).toEqual([path, 100]);
      // The prompt's 400 characters, and the few of the body's other strings (model, role).
      expect(u.prompt_tokens).toBeGreaterThanOrEqual(100);
      expect(u.prompt_tokens).toBeLessThan(110);
    }
  });

  it("charges a whole answer its client left while the gateway read its body the prompt's estimate, as a relayed one: held whole, or chunked before its first byte", async () => {
    for (const model of ["keys-stalled-whole", "keys-stalled-headers"]) {
      const { id, key } = await createKey({});
      const requests = upstream.stats("stalled-body").requests;
      const c = await rawPost(gw.url, "/v1/chat/completions", { model, max_tokens: 8, messages: [{ role: "user", content: "x".repeat(400) }] }, { authorization: `Bearer ${key}` });
      // The upstream has the request, and has sent its headers (and half its body, or none): the generation is done.
      await vi.waitFor(() => expect(upstream.stats("stalled-body").requests).toBe(requests + 1), EVENTUALLY);
      // The headers were written in the tick that counted the request; nothing in the gateway shows
      // when workerd has read them (a try's ttft is kept only when it settles), so this waits for it:
      // 2 s bounds reading headers already on loopback, on a loaded machine too (300 ms did not: a
      // reset before they were read is a client leaving before headers, charged nothing). No timeout
      // of these groups (first byte 60 s, whole answer 600 s) ends the request meanwhile.
      await new Promise((r) => setTimeout(r, 2_000));
      // Left by a reset, which the runtime hears at once (a FIN it would hear only when the answer is written: disconnects.test.ts).
      c.reset();
      await vi.waitFor(() => expect(upstream.stats("stalled-body").open).toBe(0), EVENTUALLY);
      await vi.waitFor(async () => expect(await gw.inFlight(model)).toBe(0), EVENTUALLY);
      // No completion came.
      await expectOneEstimate(id, model, 0);
    }
  });

  it("does not count usage no engine could report (1e308 tokens): the key's usage and spend stay numbers, and its budget counts the rest", async () => {
    const { id, key } = await createKey({ budget_tokens: 20 });
    let refused: Response | null = null;
    let absurd = 0;
    let counted = 0;
    // keys-absurd takes turns: an answer of 1e308 tokens, then one of 4.
    for (let n = 0; n < 60 && !refused; n++) {
      const res = await post(key, "keys-absurd");
      if (res.status === 429) refused = res;
      else {
        expect(res.status).toBe(200);
        const total = ((await res.json()) as { usage: { total_tokens: number } }).usage.total_tokens;
        if (total === 1e308) absurd++;
        else counted += total;
      }
    }
    expect(absurd).toBeGreaterThan(0);
    expect(refused && (await errorOf(refused)).code).toBe("insufficient_quota");
    expect(counted).toBeGreaterThanOrEqual(20);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(absurd + counted / 4), EVENTUALLY);
    const u = (await (await admin("GET", `/usage?key=${id}`)).json()) as UsageTotals & { cost_usd: number };
    expect(u.prompt_tokens + u.completion_tokens).toBe(counted);
    expect(u.cost_usd).toBeCloseTo((counted * 2) / 1e6, 12);
    const view = (await (await admin("GET", `/keys/${id}`)).json()) as { spent: { tokens: number } };
    expect(view.spent.tokens).toBe(counted);
  });

  it("counts a non-streamed answer once when the first backend broke its body off and another answered", async () => {
    const { id, key } = await createKey({});
    const res = await post(key, "keys-cut", { max_tokens: 7 });
    expect(res.status).toBe(200);
    // The group's other backend answered (sim-1): a virtual key is not told which one (README: routing headers).
    expect(res.headers.get("x-kvgate-attempts")).toBe("2");
    const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    const u = await usage(id);
    expect([u.prompt_tokens, u.completion_tokens]).toEqual([body.usage.prompt_tokens, 7]);
  });
  it("counts a non-streamed answer whose usage comes before a long field (vLLM's prompt_logprobs, a rerank's results), held whole or relayed", async () => {
    for (const model of ["keys-usage-first", "keys-usage-first-chunked"]) {
      const { id, key } = await createKey({});
      const res = await post(key, model);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number }; prompt_logprobs: unknown[] };
      expect(JSON.stringify(body.prompt_logprobs).length).toBeGreaterThan(16 * 1024);
      await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
      const u = await usage(id);
      expect([model, u.prompt_tokens, u.completion_tokens]).toEqual([model, 7, 2]);
    }
  });

  it("counts a relayed non-streamed answer whose usage lies mid-body, past its first and before its last 8 KiB (vLLM's logprobs, then usage, then prompt_logprobs)", async () => {
    // Chunked without a content-length (a proxy stripped it), and over 1 MiB saying its length: both relayed, not held whole.
    for (const model of ["keys-usage-middle", "keys-usage-middle-sized"]) {
      const { id, key } = await createKey({});
      const res = await post(key, model, { logprobs: true, top_logprobs: 1, max_tokens: 4000, prompt_logprobs: 1 });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
      expect(body.usage.completion_tokens).toBe(2);
      await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
      const u = await usage(id);
      expect([model, u.prompt_tokens, u.completion_tokens]).toEqual([model, 7, 2]);
    }
  });

  it("counts a relayed Responses answer by its top-level usage mid-body, not by a usage object the client wrote in a tool's schema", async () => {
    const { id, key } = await createKey({});
    const schema = { type: "object", properties: { usage: { input_tokens: 1000, output_tokens: 1000, prompt_tokens: 1000, completion_tokens: 1000 } } };
    const res = await fetch(`${gw.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "keys-responses-usage-middle", input: "hi", tools: [{ type: "function", name: "f", parameters: schema }] }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { usage: { input_tokens: number; output_tokens: number } };
    expect(body.usage.output_tokens).toBe(2);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    const u = await usage(id);
    expect([u.prompt_tokens, u.completion_tokens]).toEqual([7, 2]);
  });

  it("counts a rerank whose usage is a total alone (older vLLM, TEI-style servers) as that many prompt tokens", async () => {
    const { id, key } = await createKey({});
    const res = await fetch(`${gw.url}/v1/rerank`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "keys-total-only", query: "which?", documents: ["a", "b"] }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    await res.arrayBuffer();
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    const u = await usage(id);
    expect([u.prompt_tokens, u.completion_tokens]).toEqual([37, 0]);
  });

  // 64 MiB through the gateway, counted as it passes, and parsed here: CPU-bound work, 14 s of it
  // under CPU load beside other test files, and past the 30 s default in 1 of 5 such runs.
  it("counts a non-streamed answer too large to hold whole as it passes, and never holds it whole", { timeout: 120_000 }, async () => {
    const { id, key } = await createKey({});
    const res = await post(key, "keys-big");
    expect(res.status).toBe(200);
    // The headers came while the upstream was still writing: the gateway did not wait for (and keep) all 64 MiB first.
    expect(upstream.stats("big-answer").bytesWritten).toBeLessThan(64 * 1024 * 1024);
    const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; completion_tokens: number } };
    expect(body.choices[0]?.message.content.length).toBe(64 * 1024 * 1024);
    // Its usage, at its very end, is counted as a small answer's would be.
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    const u = await usage(id);
    expect([u.prompt_tokens, u.completion_tokens]).toEqual([body.usage.prompt_tokens, body.usage.completion_tokens]);
    expect(u.prompt_tokens).toBe(3);
  });
});

describe("limits", () => {
  it("refuses the request past the key's requests per minute with a 429 rate_limit_exceeded and Retry-After, and no GPU sees it", async () => {
    const { key } = await createKey({ rpm: 3 });
    for (let i = 0; i < 3; i++) expect((await post(key, "keys")).status).toBe(200);
    const before = await fleetTokens(fleet);
    const res = await post(key, "keys");
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(Number(res.headers.get("retry-after"))).toBeLessThanOrEqual(60);
    const err = await errorOf(res);
    expect(err.code).toBe("rate_limit_exceeded");
    expect(err.message).toContain("requests per minute");
    expect((await fleetTokens(fleet)).requests).toBe(before.requests);
  });

  it("refuses past the key's requests in flight, and takes the next once one ends", async () => {
    const { key } = await createKey({ max_parallel: 2 });
    // Streams that last 10 s unless cancelled: in flight through the check below, however slow the machine.
    const open = [post(key, "keys-slow", { stream: true, max_tokens: 1000 }), post(key, "keys-slow", { stream: true, max_tokens: 1000 })];
    const streams = await Promise.all(open);
    for (const s of streams) expect(s.status).toBe(200);
    const third = await post(key, "keys-slow");
    expect(third.status).toBe(429);
    expect((await errorOf(third)).code).toBe("rate_limit_exceeded");
    expect(third.headers.get("retry-after")).toBe("1");
    await Promise.all(streams.map((s) => s.body?.cancel()));
    await vi.waitFor(async () => expect((await post(key, "keys-slow")).status).toBe(200), EVENTUALLY);
  });

  it("holds the key's requests in flight in a fallback group too: a request that failed first in its own group is checked there as any other", async () => {
    const { key } = await createKey({ max_parallel: 1 });
    // A stream that lasts 10 s unless cancelled: in flight through every check below.
    const open = await post(key, "keys-slow", { stream: true, max_tokens: 1000 });
    expect(open.status).toBe(200);
    // keys-fallback's one server answers 503; its fallback is keys-slow, where the key has its one request in flight.
    const fellBack = await post(key, "keys-fallback");
    expect(fellBack.status).toBe(429);
    expect((await errorOf(fellBack)).message).toContain("requests in flight");
    await open.body?.cancel();
    await vi.waitFor(async () => {
      const res = await post(key, "keys-fallback");
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvgate-group")).toBe("keys-slow");
    }, EVENTUALLY);
  });

  it("counts the upstream's tokens against the key's tokens per minute", async () => {
    const { key } = await createKey({ tpm: 40, track_usage: false });
    // One request of more than 40 tokens: the next is refused once its usage is in.
    expect((await post(key, "keys", { max_tokens: 30, stream: true })).status).toBe(200);
    await vi.waitFor(async () => {
      const res = await post(key, "keys");
      expect(res.status).toBe(429);
      expect((await errorOf(res)).message).toContain("tokens per minute");
    }, EVENTUALLY);
  });

  it("refuses a spent budget with insufficient_quota, and concurrent requests overshoot it by at most max_parallel requests", async () => {
    const budget = 200;
    const parallel = 3;
    const { id, key } = await createKey({ budget_tokens: budget, budget_period: "day", max_parallel: parallel });
    let quota: Response | null = null;
    let served = 0;
    const maxTokens = 16;
    // Four clients send back to back until the budget refuses them.
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let n = 0; n < 200 && !quota; n++) {
          const res = await post(key, "keys", { max_tokens: maxTokens, stream: n % 2 === 0 });
          if (res.status === 429 && (await errorOf(res.clone())).code === "insufficient_quota") quota = res;
          else {
            if (res.status === 200) served++;
            await res.text();
          }
        }
      }),
    );
    expect(quota).not.toBeNull();
    const r = quota as unknown as Response;
    // Spent for the day: try again when the next UTC day starts.
    const wait = Number(r.headers.get("retry-after"));
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(86_400);
    expect((await errorOf(r)).type).toBe("insufficient_quota");
    expect(served).toBeGreaterThan(0);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(served), EVENTUALLY);
    // Every request costs the same here: a prompt of a few tokens and maxTokens out.
    const u = await usage(id);
    const spent = u.prompt_tokens + u.completion_tokens;
    const perRequest = spent / u.requests;
    expect(spent).toBeGreaterThanOrEqual(budget);
    expect(spent).toBeLessThan(budget + parallel * perRequest);
  });

  it("a key with no max_parallel overshoots its budget by at most the requests it has in flight when it is crossed", async () => {
    const budget = 200;
    const clients = 6;
    const { id, key } = await createKey({ budget_tokens: budget, budget_period: "day" });
    let refused = false;
    let served = 0;
    // Six clients send back to back until the budget refuses them: at most six in flight at once.
    await Promise.all(
      Array.from({ length: clients }, async () => {
        for (let n = 0; n < 200 && !refused; n++) {
          const res = await post(key, "keys", { max_tokens: 16, stream: n % 2 === 0 });
          if (res.status === 429 && (await errorOf(res.clone())).code === "insufficient_quota") refused = true;
          else if (res.status === 200) served++;
          await res.text();
        }
      }),
    );
    expect(refused).toBe(true);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(served), EVENTUALLY);
    const u = await usage(id);
    const spent = u.prompt_tokens + u.completion_tokens;
    expect(spent).toBeGreaterThanOrEqual(budget);
    expect(spent).toBeLessThan(budget + clients * (spent / u.requests));
  });

  it.each([
    ["for good", "total"],
    ["for the month", "month"],
  ])("a budget spent %s is refused to the official SDK at once: it is told not to retry a refusal its retries cannot outlast", async (_, period) => {
    // A browser page's key: the SDK in the page reads only the headers CORS exposes.
    const origin = "https://budget.example";
    const { id, key } = await createKey({ budget_tokens: 5, budget_period: period, origins: [origin] });
    let calls = 0;
    // The SDK's defaults: two retries of every 429, a Retry-After past 60 s read as none.
    const sdk = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, defaultHeaders: { origin }, fetch: (url, init) => (calls++, fetch(url, init)) });
    await sdk.chat.completions.create({ model: "keys", messages: [{ role: "user", content: "spend the budget" }], max_tokens: 8 });
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    calls = 0;
    const err = await sdk.chat.completions.create({ model: "keys", messages: [{ role: "user", content: "and more" }], max_tokens: 8 }).catch((e: unknown) => e);
    if (!(err instanceof OpenAI.RateLimitError)) throw err;
    expect(err.code).toBe("insufficient_quota");
    expect(err.headers?.get("x-should-retry")).toBe("false");
    expect(err.headers?.get("access-control-expose-headers")?.split(",")).toContain("x-should-retry");
    expect(calls).toBe(1);
  });

  it.each([
    ["asked for the usage event (read from a copy)", true],
    ["did not ask for it (taken out)", false],
  ])("charges a stream its client left before the usage event, when the client %s: an estimate, so a budget holds against clients that leave", async (_, asked) => {
    const budget = 150;
    const { id, key } = await createKey({ budget_tokens: budget, budget_period: "total" });
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const take = 60;
    let left = 0;
    let refusal: unknown = null;
    // Each stream would run 1,000 tokens (10 s); the client takes 60 of them and leaves, as a
    // client that stops a generation does: the usage event never comes.
    for (let n = 0; n < 8 && refusal === null; n++) {
      try {
        const stream = await client.chat.completions.create({ model: "keys-slow", messages: [{ role: "user", content: `leave early ${n}` }], max_tokens: 1000, stream: true, ...(asked ? { stream_options: { include_usage: true } } : {}) });
        let events = 0;
        for await (const chunk of stream) {
          expect(chunk.usage ?? null).toBeNull();
          if (chunk.choices[0]?.delta?.content && ++events === take) break;
        }
        expect(events).toBe(take);
        left++;
        // The next request comes once the gateway has seen this one leave: a request sent before
        // that is one in flight when the budget is crossed, which it may overshoot by.
        await vi.waitFor(async () => expect(await gw.inFlight("keys-slow")).toBe(0), EVENTUALLY);
      } catch (e) {
        refusal = e;
      }
    }
    // 60 tokens out and a prompt each: the budget of 150 is spent by the third.
    if (!(refusal instanceof OpenAI.RateLimitError)) throw refusal ?? new Error(`${left} streams left early and the budget never refused one`);
    expect(refusal.code).toBe("insufficient_quota");
    expect(left).toBeGreaterThanOrEqual(2);
    expect(left).toBeLessThanOrEqual(3);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(left), EVENTUALLY);
    const u = await usage(id);
    // One completion token per event relayed, the role's and the events in flight when it left included.
    expect(u.completion_tokens).toBeGreaterThanOrEqual(left * take);
    expect(u.completion_tokens).toBeLessThan(left * (take + 40));
    expect(u.prompt_tokens).toBeGreaterThan(0);
  });

  it("charges a left stream's prompt the engine read whether or not its text looks like a data URL (found by review: `data:,` before 40k characters was charged 3 prompt tokens for ~9,800)", async () => {
    const text = "The quarterly report says revenue grew in every region. ".repeat(700);
    /** What the key was charged for one stream left after 20 tokens, and what the engine read of its prompt. */
    const leftEarly = async (asked: Pick<OpenAI.ChatCompletionCreateParamsStreaming, "messages" | "tools">): Promise<{ charged: number; read: number }> => {
      const { id, key } = await createKey({});
      const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
      const before = (await fleetTokens(slow)).prompt;
      const stream = await client.chat.completions.create({ model: "keys-slow", ...asked, max_tokens: 1000, stream: true });
      let events = 0;
      for await (const chunk of stream) if (chunk.choices[0]?.delta?.content && ++events === 20) break;
      await vi.waitFor(async () => expect(await gw.inFlight("keys-slow")).toBe(0), EVENTUALLY);
      await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
      return { charged: (await usage(id)).prompt_tokens, read: (await fleetTokens(slow)).prompt - before };
    };
    const tag = () => randomBytes(4).toString("hex");
    const user = (content: OpenAI.ChatCompletionUserMessageParam["content"]) => ({ messages: [{ role: "user" as const, content }] });
    const forms: [string, Pick<OpenAI.ChatCompletionCreateParamsStreaming, "messages" | "tools">][] = [
      ["plain text", user(`summarise ${tag()}: ${text}`)],
      ["text after data:,", user(`data:,summarise ${tag()}: ${text}`)],
      ["a text part after data:text/plain,", user([{ type: "text", text: `data:text/plain,summarise ${tag()}: ${text}` }])],
      ["a tool schema's property named data", { ...user(`summarise ${tag()}`), tools: [{ type: "function", function: { name: "report", parameters: { type: "object", properties: { data: { type: "string", description: text } } } } }] }],
    ];
    for (const [form, asked] of forms) {
      const { charged, read } = await leftEarly(asked);
      expect(read, form).toBeGreaterThan(text.length / 5);
      expect(charged, form).toBeGreaterThan(read / 2);
    }
  });

  it("charges a left stream's screenshot as media, not its base64 as text: a computer call's output, one image part and not a list (found by review: a 1 MB screenshot was charged ~275k prompt tokens)", async () => {
    const { id, key } = await createKey({});
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const shot = `data:image/png;base64,${randomBytes(750_000).toString("base64")}`;
    const input: OpenAI.Responses.ResponseInput = [
      { role: "user", content: `click the button ${randomBytes(4).toString("hex")}` },
      { type: "computer_call_output", call_id: "c1", output: { type: "computer_screenshot", image_url: shot } },
    ];
    const stream = await client.responses.create({ model: "keys-slow", input, max_output_tokens: 1000, stream: true });
    let events = 0;
    for await (const event of stream) if (event.type === "response.output_text.delta" && ++events === 20) break;
    await vi.waitFor(async () => expect(await gw.inFlight("keys-slow")).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect((await usage(id)).requests).toBe(1), EVENTUALLY);
    const charged = (await usage(id)).prompt_tokens;
    // The item's text, a few dozen tokens; an engine spends an image's ~1k on the screenshot, not its 1 MB read as text.
    expect(charged).toBeGreaterThan(0);
    expect(charged).toBeLessThan(1000);
  });

  it("refuses a key whose only budget is in dollars on a model with no pricing (a 403 model_not_priced, not a budget that never fills), and passes over such a fallback group", async () => {
    const { key } = await createKey({ budget_usd: 0.000001 });
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const ask = (model: string) => client.chat.completions.create({ model, max_tokens: 8, messages: [{ role: "user", content: `hello ${randomBytes(4).toString("hex")}` }] });
    // Its tokens would cost nothing there: every request would be served, however many.
    for (let n = 0; n < 3; n++) {
      const e = await ask("keys").then(() => null, (x: unknown) => x);
      expect(e, `request ${n + 1}`).toBeInstanceOf(OpenAI.PermissionDeniedError);
      expect(e).toMatchObject({ status: 403, code: "model_not_priced" });
      expect((e as Error).message).toMatch(/model "keys" has no pricing/);
    }
    // The model list is the models the key can use: not one it is refused, and a look-up of one answers as a call does.
    const listed = (await client.models.list()).data.map((m) => m.id);
    expect(listed).toContain("keys-priced");
    expect(listed).not.toContain("keys");
    const looked = await client.models.retrieve("keys").then(() => null, (x: unknown) => x);
    expect(looked).toMatchObject({ status: 403, code: "model_not_priced" });
    expect(await client.models.retrieve("keys-priced")).toMatchObject({ id: "keys-priced" });
    // A priced model counts its dollars: the millionth of a dollar is spent by the first answer.
    let quota: unknown = null;
    for (let n = 0; n < 5 && !quota; n++) await ask("keys-priced").catch((x: unknown) => (quota = x));
    expect(quota).toBeInstanceOf(OpenAI.RateLimitError);
    expect(quota).toMatchObject({ status: 429, code: "insufficient_quota" });
    // A fallback group with no pricing is passed over, as one the key may not call: the next, priced, serves.
    const rich = await createKey({ budget_usd: 5 });
    const res = await post(rich.key, "keys-priced-fallback");
    expect(res.status, await res.clone().text()).toBe(200);
    expect(res.headers.get("x-kvgate-group")).toBe("keys-priced");
    await res.text();
    // A token budget is counted anywhere: a key with one (and dollars beside it) is served there as before.
    const tokens = await createKey({ budget_tokens: 10_000, budget_usd: 0.000001 });
    const served = await post(tokens.key, "keys");
    expect(served.status).toBe(200);
    await served.text();
    const tokensClient = new OpenAI({ apiKey: tokens.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    expect((await tokensClient.models.list()).data.map((m) => m.id)).toContain("keys");
  });

  it("a limit that lifts within the SDK's wait is left to its retries", async () => {
    const { key } = await createKey({ max_parallel: 1 });
    // A stream that lasts 10 s unless cancelled: in flight through the check below, however slow the machine.
    const open = await post(key, "keys-slow", { stream: true, max_tokens: 1000 });
    const refused = await post(key, "keys-slow");
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.headers.get("x-should-retry")).toBeNull();
    await open.body?.cancel();
  });
});

describe("the key itself", () => {
  it("is refused with a 401 within 10 seconds of its revocation, while it was in steady use", async () => {
    const { id, key } = await createKey({});
    expect((await post(key, "keys")).status).toBe(200);
    expect((await admin("POST", `/keys/${id}/revoke`)).status).toBe(200);
    const revokedAt = Date.now();
    let refused: Response | null = null;
    let lastServedSentAt = -Infinity;
    while (!refused && Date.now() - revokedAt < 15_000) {
      const sentAt = Date.now();
      const res = await post(key, "keys");
      if (res.status === 401) refused = res;
      else {
        expect(res.status).toBe(200);
        lastServedSentAt = sentAt;
        await res.text();
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    expect(refused).not.toBeNull();
    // The isolate's cache bound (10 s): a request sent 10 s after the revocation had landed is never
    // served. (Timed from when each was sent, not when the 401 came back: that timed the machine.)
    expect(lastServedSentAt - revokedAt).toBeLessThan(10_000);
    const err = await errorOf(refused as unknown as Response);
    expect(err.code).toBe("invalid_api_key");
    expect(err.message).toContain("revoked");
  });

  it("is refused when unknown or expired, with a 401 that names no key", async () => {
    const unknown = `sk-kvg-${"A".repeat(40)}`;
    const res = await post(unknown, "keys");
    expect(res.status).toBe(401);
    expect(JSON.stringify(await res.json())).not.toContain(unknown);
    const { key } = await createKey({ expires_at: new Date(Date.now() + 1500).toISOString() });
    expect((await post(key, "keys")).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1600));
    const expired = await post(key, "keys");
    expect(expired.status).toBe(401);
    expect((await errorOf(expired)).message).toContain("expired");
  });

  it("calls only its models: another is answered as a model that does not exist, so a key learns nothing of the gateway's other models, and /v1/models lists only its own", async () => {
    const { key } = await createKey({ models: ["keys"] });
    expect((await post(key, "keys")).status).toBe(200);
    const other = await post(key, "keys-other");
    const none = await post(key, "no-such-model");
    expect([other.status, none.status]).toEqual([404, 404]);
    const [a, b] = [await errorOf(other), await errorOf(none)];
    expect(a.code).toBe("model_not_found");
    expect({ ...a, message: a.message.replace("keys-other", "M") }).toEqual({ ...b, message: b.message.replace("no-such-model", "M") });
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(["keys"]);
  });

  it("administers nothing and reads no gateway status", async () => {
    const { key } = await createKey({});
    const status = await fetch(`${gw.url}/v1/kvgate/status`, { headers: { authorization: `Bearer ${key}` } });
    expect(status.status).toBe(403);
    const keys = await fetch(`${gw.url}/admin/v1/keys`, { headers: { authorization: `Bearer ${key}` } });
    expect(keys.status).toBe(401);
  });
});

describe("a browser app's key", () => {
  const page = "https://chat.example";

  it("answers its own page (preflight and request) and refuses any other origin, or none", async () => {
    const { key } = await createKey({ origins: [page], rpm: 30 });
    const preflight = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "OPTIONS",
      headers: { origin: page, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get("access-control-allow-origin")).toBe(page);
    expect(preflight.headers.get("access-control-allow-headers")).toContain("authorization");
    const ok = await post(key, "keys", {}, { origin: page });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("access-control-allow-origin")).toBe(page);
    expect(ok.headers.get("access-control-expose-headers")).toContain("x-kvgate-backend");
    // Its limits' answers are readable by its page too.
    const other = await post(key, "keys", {}, { origin: "https://evil.example" });
    expect(other.status).toBe(403);
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
    expect((await errorOf(other)).code).toBe("origin_not_allowed");
    expect((await post(key, "keys")).status).toBe(403);
    // vLLM's own paths outside /v1 take the same key, and their errors are readable by its page too.
    for (const path of ["/rerank", "/v2/rerank", "/score"]) {
      const bad = await fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", origin: page }, body: JSON.stringify({ model: "keys" }) });
      expect(bad.status).toBe(400);
      expect(bad.headers.get("access-control-allow-origin")).toBe(page);
      expect(bad.headers.get("x-request-id")).toBeTruthy();
    }
    // A page no key is for gets no preflight.
    const stranger = await fetch(`${gw.url}/v1/chat/completions`, { method: "OPTIONS", headers: { origin: "https://evil.example", "access-control-request-method": "POST" } });
    expect(stranger.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("its page reads the 401 of a key the gateway no longer takes (revoked, or never issued), as it was granted the preflight", async () => {
    const { id, key } = await createKey({ origins: [page] });
    // Revoked before its first use, so that no isolate holds it as it was.
    expect((await admin("POST", `/keys/${id}/revoke`)).status).toBe(200);
    const unknown = `sk-kvg-${randomBytes(20).toString("hex")}`;
    for (const [k, path] of [[key, "/v1/chat/completions"], [key, "/rerank"], [unknown, "/v1/chat/completions"]] as const) {
      const refused = await fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${k}`, "content-type": "application/json", origin: page }, body: JSON.stringify({ model: "keys", messages: [{ role: "user", content: "hi" }] }) });
      expect(refused.status, path).toBe(401);
      expect(refused.headers.get("access-control-allow-origin"), path).toBe(page);
      expect(refused.headers.get("vary"), path).toMatch(/origin/i);
      expect((await errorOf(refused)).code).toBe("invalid_api_key");
    }
    const models = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}`, origin: page } });
    expect(models.status).toBe(401);
    expect(models.headers.get("access-control-allow-origin")).toBe(page);
    // A page no key is for is told nothing, as its preflight was.
    const stranger = await post(key, "keys", {}, { origin: "https://evil.example" });
    expect(stranger.status).toBe(401);
    expect(stranger.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("the page of a key the gateway no longer takes (revoked, expired), its only key, is granted its preflight, and reads the 401 that follows", async () => {
    const revokedPage = "https://solo.example";
    const expiredPage = "https://solo-expired.example";
    const revoked = await createKey({ origins: [revokedPage] });
    expect((await admin("POST", `/keys/${revoked.id}/revoke`)).status).toBe(200);
    // A margin a loaded machine's create survives: an expiry already past when it lands is refused
    // (keys-cli.test.ts takes 3 s; this create goes through workerd to the tenants object).
    const expiresAt = Date.now() + 5000;
    const expired = await createKey({ origins: [expiredPage], expires_at: new Date(expiresAt).toISOString() });
    await new Promise((r) => setTimeout(r, expiresAt + 100 - Date.now()));
    // A live key made after both: once its page is granted, the isolate has read the keys' origins
    // since the revocation and the expiry, so what the two pages get is not an older read's.
    const witness = "https://witness.example";
    await createKey({ origins: [witness] });
    const preflight = (origin: string) =>
      fetch(`${gw.url}/v1/chat/completions`, {
        method: "OPTIONS",
        headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" },
      });
    // The isolate reads them at most every 10 s (workers/gateway/key-cache.ts): a margin past that.
    await vi.waitFor(async () => expect((await preflight(witness)).status).toBe(204), { ...EVENTUALLY, timeout: 15_000 });
    for (const [page, key] of [[revokedPage, revoked.key], [expiredPage, expired.key]] as const) {
      const granted = await preflight(page);
      expect(granted.status, page).toBe(204);
      expect(granted.headers.get("access-control-allow-origin"), page).toBe(page);
      expect(granted.headers.get("access-control-allow-headers"), page).toContain("authorization");
      // What the browser then sends: the key's 401, readable by its page.
      const refused = await post(key, "keys", {}, { origin: page });
      expect(refused.status, page).toBe(401);
      expect(refused.headers.get("access-control-allow-origin"), page).toBe(page);
      expect((await errorOf(refused)).message, page).toMatch(page === revokedPage ? /revoked/ : /expired/);
    }
  });
});

describe("secrecy", () => {
  it("no key made here appears in the gateway's logs, its status, or the admin API's lists", async () => {
    expect(issued.length).toBeGreaterThan(5);
    const status = await (await fetch(`${gw.url}/v1/kvgate/status`, { headers: { authorization: `Bearer ${gw.key}` } })).text();
    const list = await (await admin("GET", "/keys")).text();
    const logs = gw.logs.join("\n");
    for (const key of issued) {
      expect(status).not.toContain(key);
      expect(list).not.toContain(key);
      expect(logs).not.toContain(key);
      // Nor the part of it past the visible prefix.
      expect(logs).not.toContain(key.slice(12));
    }
  });
});
