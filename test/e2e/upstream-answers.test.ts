import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What a hostile or broken upstream answers, and what the client gets of it (issue 10 §5):
 * redirects are never followed, error bodies are read only so far and so long, and a client sees
 * the upstream's own OpenAI-style error, bounded, or a generic one naming the backend.
 */

let upstream: HostileUpstream;
let gw: TestGateway;

const hostile = (behaviour: string, id = behaviour.replace(/:.*/, "")) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b" });
const single = (name: string, behaviour: string, extra: Record<string, unknown> = {}) => ({ name, failover: { maxAttempts: 1 }, deployments: [hostile(behaviour)], ...extra });

/** nginx's 4xx pages a proxy in front of an engine answers with (test/support/hostile-upstream.ts html-400). */
const PROXY_PAGES = ["plain-http", "no-cert", "not-allowed", "misdirected"] as const;
/** Two failures in a row open a breaker, and nothing closes it during the file. */
const PAGE_BREAKER = { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 60_000 };

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({
    modelGroups: [
      single("redirect-307", "redirect:307"),
      single("redirect-301", "redirect:301"),
      single("redirect-loop", "redirect-loop"),
      single("big-error", "big-error:300"),
      single("drip-error", "drip-error"),
      single("html-500", "html-500"),
      single("context-exceeded", "context-exceeded"),
      single("validation-2k", "validation-400:2"),
      single("validation-10k", "validation-400:10"),
      single("rate-limited", "rate-limited:30"),
      single("rate-limited-long", "rate-limited:300"),
      single("empty", "empty"),
      { name: "empty-or-ok", strategy: "round-robin", breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("empty"), hostile("ok")] },
      single("empty-chunked", "empty:chunked"),
      // The same read for its usage, or under a total deadline: the body is piped, not handed over.
      single("empty-chunked-sampled", "empty:chunked", { feedback: { sampleRate: 1 } }),
      single("empty-chunked-deadline", "empty:chunked", { totalTimeoutMs: 60_000 }),
      { name: "empty-chunked-or-ok", strategy: "round-robin", breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("empty:chunked"), hostile("ok")] },
      ...["gzip", "br", "deflate", "zstd"].map((coding) => single(coding, `encoded:${coding}`)),
      // The JavaScript stream path (a hook), which writes keep-alive comments into a quiet SSE stream.
      single("json-always", "json-always:1500", { hooks: ["restamp"] }),
      // The default path: the runtime pipes the answer after the bytes the gateway read first.
      single("json-always-native", "json-always:300"),
      single("html-200", "html-200"),
      { name: "html-or-ok", strategy: "round-robin", breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("html-200"), hostile("ok")] },
      { name: "deflate-or-ok", strategy: "round-robin", breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("encoded:deflate"), hostile("ok")] },
      // A proxy's own 4xx page on one backend (review s63 finding 2), an engine's JSON 4xx beside a
      // healthy one, the same page from every backend, and a group of one.
      ...PROXY_PAGES.map((page) => ({ name: `page-${page}-or-ok`, strategy: "round-robin" as const, breaker: PAGE_BREAKER, deployments: [hostile(`html-400:${page}`, "page"), hostile("ok")] })),
      ...["context-exceeded", "validation-400"].map((engine) => ({ name: `${engine}-or-ok`, strategy: "round-robin" as const, breaker: PAGE_BREAKER, deployments: [hostile(engine), hostile("ok")] })),
      { name: "page-twice", strategy: "round-robin", breaker: PAGE_BREAKER, deployments: [hostile("html-400", "page-a"), hostile("html-400", "page-b")] },
      { name: "page-alone", breaker: PAGE_BREAKER, deployments: [hostile("html-400", "page")] },
      // An engine's plain-text 4xx (TGI's, axum's) beside a healthy backend, with no attempt past the first and by default (review s63 finding 3).
      { name: "axum-or-ok", strategy: "round-robin", failover: { maxAttempts: 1 }, breaker: PAGE_BREAKER, deployments: [hostile("axum-422", "axum"), hostile("ok")] },
      { name: "axum-or-ok-failover", strategy: "round-robin", breaker: PAGE_BREAKER, deployments: [hostile("axum-422", "axum"), hostile("ok")] },
      // One llama.cpp embeddings server, every setting its default (review of failover: its 500 for an input over its ubatch).
      { name: "embed-alone", deployments: [hostile("llamacpp-ubatch")] },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

async function chat(model: string): Promise<{ status: number; headers: Headers; error: Record<string, unknown> }> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }] }),
  });
  const body = (await res.json()) as { error: Record<string, unknown> };
  return { status: res.status, headers: res.headers, error: body.error };
}

/** A chat request, streamed or not, as it came back. */
const ask = (model: string, stream: boolean) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream, messages: [{ role: "user", content: "hello" }] }),
  });

/**
 * A round-robin group of backend `failing` and one that answers (`ok`): requests meet the failing
 * one first in turn and go on to the other, so every one is answered by `ok`, and the failing
 * backend is charged with each it failed.
 */
async function servedPast(group: string, failing: string): Promise<void> {
  let met = 0;
  for (const stream of [true, false]) {
    for (let i = 0; i < 4; i++) {
      const res = await ask(group, stream);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvgate-backend")).toBe("ok");
      if (res.headers.get("x-kvgate-attempts") === "2") met++;
      expect(await res.text()).toContain(stream ? "data: [DONE]" : '"content":"ok"');
    }
  }
  expect(met).toBeGreaterThan(0);
  await vi.waitFor(async () => expect((await gw.status(group)).backends.find((b) => b.id === failing)?.failed).toBe(met), EVENTUALLY);
}

describe("redirects are never followed", () => {
  it.each(["redirect-307", "redirect-301"])("%s: nothing reaches the other origin, and the client gets a 502 that counts against the backend", async (group) => {
    upstream.reset();
    const r = await chat(group);
    expect(r.status).toBe(502);
    expect(upstream.elsewhere.hits()).toBe(0);
    await vi.waitFor(async () => expect((await gw.status(group)).backends[0]?.failed).toBe(1), EVENTUALLY);
  });

  it("a redirect loop through a URL with credentials leaks neither the chain nor the credentials", async () => {
    const r = await chat("redirect-loop");
    expect(r.status).toBe(502);
    expect(JSON.stringify(r.error)).not.toContain("hunter2");
    expect(JSON.stringify(r.error)).not.toContain("user:");
  });
});

describe("error bodies are read only so far and so long", () => {
  it("a 300 MiB error body: the gateway reads a few KiB and answers at once", async () => {
    upstream.reset();
    const r = await chat("big-error");
    expect(r.status).toBe(502);
    await vi.waitFor(() => expect(upstream.stats("big-error").open).toBe(0), EVENTUALLY);
    // Socket buffers on both sides hold a few MiB at most; the gateway itself stopped after a few KiB.
    expect(upstream.stats("big-error").bytesWritten).toBeLessThan(16 * 1024 * 1024);
  });

  it("a 503 whose body drips forever is answered within a few seconds", async () => {
    const started = Date.now();
    const r = await chat("drip-error");
    expect(r.status).toBeGreaterThanOrEqual(502);
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe("what the client reads of an upstream's error", () => {
  it("HTML and tracebacks never reach the client: a generic message names the backend", async () => {
    const r = await chat("html-500");
    expect(r.status).toBe(502);
    const text = JSON.stringify(r.error);
    expect(text).not.toMatch(/Traceback|secret_path|<html/);
    expect(r.error.message).toContain("html-500");
  });

  it("an OpenAI-style error keeps its type, code and extra fields (llama.cpp's context overflow)", async () => {
    const r = await chat("context-exceeded");
    expect(r.status).toBe(400);
    expect(r.error).toMatchObject({ type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 });
    expect(r.error.message).toMatch(/exceeds the available context size/);
  });

  it.each(["validation-2k", "validation-10k"])("a 400 whose body the gateway reads only in part (vLLM's validation error, holding the request twice): %s keeps its reason and its status", async (model) => {
    const r = await chat(model);
    expect(r.status).toBe(400);
    expect(r.error.message).toContain("Value error, Stream options can only be defined when `stream=True`.");
    expect((r.error.message as string).length).toBeLessThanOrEqual(1000);
  });

  it("an empty 200 (a stream with no event, an answer of length 0) is the backend's failure: another answers, or the client gets a 502, never an empty 200", async () => {
    for (const stream of [true, false]) {
      const alone = await ask("empty", stream);
      expect([stream, alone.status]).toEqual([stream, 502]);
      expect(((await alone.json()) as { error: { message: string } }).error.message).toContain("backend empty answered without a body");
    }
    await servedPast("empty-or-ok", "empty");
  });

  it("a non-streamed 200 that does not say its length and sends nothing (chunked, no chunk) is empty too: the openai SDK gets a 502, never undefined for a completion; another backend answers", async () => {
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    for (const model of ["empty-chunked", "empty-chunked-sampled", "empty-chunked-deadline"]) {
      const outcome = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hello" }] }).then(
        (answered) => ({ model, answered }),
        (e: unknown) => (e instanceof OpenAI.APIError ? { model, status: e.status, message: e.message } : { model, thrown: String(e) }),
      );
      expect(outcome).toEqual({ model, status: 502, message: "502 backend empty answered without a body (HTTP 200)" });
    }
    await servedPast("empty-chunked-or-ok", "empty");
  });

  it("a success in a content-encoding the runtime does not decode (deflate, zstd) is the backend's failure, as an empty one is: another answers, or the client gets a 502, never bytes it cannot read", async () => {
    for (const stream of [false, true]) {
      // The runtime decodes these: the client reads the answer as it was written.
      for (const coding of ["gzip", "br"]) {
        const res = await ask(coding, stream);
        expect([coding, stream, res.status]).toEqual([coding, stream, 200]);
        expect(res.headers.get("content-encoding")).toBeNull();
        expect(await res.text()).toContain(stream ? "data: [DONE]" : '"content":"ok"');
      }
      for (const coding of ["deflate", "zstd"]) {
        const res = await ask(coding, stream);
        expect([coding, stream, res.status]).toEqual([coding, stream, 502]);
        expect(((await res.json()) as { error: { message: string; code: string } }).error).toMatchObject({ code: "upstream_error", message: "backend encoded answered in a content-encoding the gateway does not decode (it asks for none) (HTTP 200)" });
      }
    }
    await servedPast("deflate-or-ok", "encoded");
  });

  it("a 200 that is an HTML page (a proxy's login page, a web UI) is the backend's failure: the openai SDK gets a 502, never a page for a completion or a stream that ends with no event; another backend answers", async () => {
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    const messages = [{ role: "user" as const, content: "hello" }];
    const outcome = async (call: () => Promise<unknown>): Promise<unknown> => {
      try {
        return { answered: await call() };
      } catch (e) {
        return e instanceof OpenAI.APIError ? { status: e.status, code: e.code, message: e.message } : { thrown: String(e) };
      }
    };
    const refused = { status: 502, code: "upstream_error", message: "502 backend html-200 answered with an HTML page, not an API's answer (HTTP 200)" };
    expect(await outcome(() => client.chat.completions.create({ model: "html-200", messages }))).toEqual(refused);
    expect(
      await outcome(async () => {
        const chunks: unknown[] = [];
        for await (const chunk of await client.chat.completions.create({ model: "html-200", messages, stream: true })) chunks.push(chunk);
        return chunks;
      }),
    ).toEqual(refused);
    await servedPast("html-or-ok", "html-200");
  });

  it.each(["json-always", "json-always-native"])("a JSON answer to a stream request (a server that ignores stream) reaches the client as the JSON it is, whole, with no keep-alive comment inside it: %s", async (model) => {
    const res = await ask(model, true);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    const text = await res.text();
    expect(text).not.toContain("keep-alive");
    expect(JSON.parse(text)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: "ok" } }] });
  });

  it("a 429's Retry-After reaches the client", async () => {
    const r = await chat("rate-limited");
    expect(r.status).toBe(429);
    expect(r.headers.get("retry-after")).toBe("30");
    // A wait the SDKs' retries take: theirs to retry after it.
    expect(r.headers.get("x-should-retry")).toBeNull();
  });

  it("a 429 whose Retry-After no retry of the official SDK outlasts is raised at once, not sent twice more into the same refusal", async () => {
    upstream.reset();
    let calls = 0;
    // The SDK's defaults: two retries of every 429, a Retry-After past 60 s read as none.
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, fetch: (url, init) => (calls++, fetch(url, init)) });
    const err = await sdk.chat.completions.create({ model: "rate-limited-long", messages: [{ role: "user", content: "hello" }] }).catch((e: unknown) => e);
    if (!(err instanceof OpenAI.RateLimitError)) throw err;
    expect([err.code, err.headers?.get("retry-after"), err.headers?.get("x-should-retry")]).toEqual(["upstream_rate_limited", "300", "false"]);
    expect(calls).toBe(1);
    expect(upstream.stats("rate-limited").requests).toBe(1);
  });
});

describe("a 4xx that is a page, not an API's error (review s63 finding 2)", () => {
  const client = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  const messages = [{ role: "user" as const, content: "hello" }];
  /** `n` chat calls through the official SDK: each one's status, backend and attempts, or its error's status, code and x-should-retry. */
  async function calls(model: string, n: number): Promise<unknown[]> {
    const seen: unknown[] = [];
    for (let i = 0; i < n; i++) {
      try {
        const { response } = await client().chat.completions.create({ model, messages }).withResponse();
        seen.push([response.status, response.headers.get("x-kvgate-backend"), response.headers.get("x-kvgate-attempts")]);
      } catch (e) {
        seen.push(e instanceof OpenAI.APIError ? [e.status, e.code, e.headers?.get("x-should-retry") ?? null] : String(e));
      }
    }
    return seen;
  }
  const backends = async (group: string) => (await gw.status(group)).backends.map((b) => [b.id, b.failed, b.breaker.state]);

  it.each(PROXY_PAGES)("a proxy's %s page on one backend is that backend's own: every request is served by the other, and its breaker opens", async (page) => {
    const group = `page-${page}-or-ok`;
    const seen = (await calls(group, 4)) as unknown[][];
    // Round-robin: two of them meet the page first and go on (a failover leaves the turn to the
    // page), and its breaker is open for the others.
    expect(seen).toEqual(seen.map((s) => [200, "ok", s[2] === "2" ? "2" : "1"]));
    expect(seen.filter((s) => s[2] === "2")).toHaveLength(2);
    await vi.waitFor(async () => expect(await backends(group)).toEqual([
      ["page", 2, "open"],
      ["ok", 0, "closed"],
    ]), EVENTUALLY);
  });

  it.each(["context-exceeded", "validation-400"])("an engine's JSON 400 (%s) beside a healthy backend is the request's: passed on unchanged, never failed over, never charged", async (engine) => {
    const group = `${engine}-or-ok`;
    const seen = await calls(group, 4);
    // Round-robin: every other request meets the engine's 400, which the SDK raises as it is, to retry nothing.
    expect(seen.filter((s) => (s as unknown[])[0] === 200)).toEqual([
      [200, "ok", "1"],
      [200, "ok", "1"],
    ]);
    // Its own code (both engines state 400), and nothing that says not to retry: the SDK retries no 400 anyway.
    expect(seen.filter((s) => (s as unknown[])[0] === 400)).toEqual([
      [400, 400, null],
      [400, 400, null],
    ]);
    const r = await chat(group);
    const error = r.status === 400 ? r.error : (await chat(group)).error;
    expect(error.message).toMatch(engine === "context-exceeded" ? /exceeds the available context size/ : /Stream options can only be defined when `stream=True`/);
    if (engine === "context-exceeded") expect(error).toMatchObject({ type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 });
    await vi.waitFor(async () => expect(await backends(group)).toEqual([
      [engine, 0, "closed"],
      ["ok", 0, "closed"],
    ]), EVENTUALLY);
  });

  it("the same page from every backend of the group is the request's: the client gets its status, retried by nothing, and no backend is charged", async () => {
    const seen = await calls("page-twice", 3);
    expect(seen).toEqual(seen.map(() => [400, "upstream_rejected", "false"]));
    const r = await chat("page-twice");
    expect([r.status, r.headers.get("x-kvgate-attempts")]).toEqual([400, "2"]);
    expect(JSON.stringify(r.error)).not.toMatch(/nginx|<html|HTTPS port/);
    await vi.waitFor(async () => expect(await backends("page-twice")).toEqual([
      ["page-a", 0, "closed"],
      ["page-b", 0, "closed"],
    ]), EVENTUALLY);
  });

  it.each(["axum-or-ok", "axum-or-ok-failover"])("an engine's plain-text 422 (TGI's, axum's) in %s is the request's, no proxy's page: passed on, never failed over, never charged", async (group) => {
    const seen = await calls(group, 4);
    // Round-robin: every other request meets the engine's 422, which the SDK raises as it is, to retry nothing.
    expect(seen.filter((s) => (s as unknown[])[0] === 200)).toEqual([
      [200, "ok", "1"],
      [200, "ok", "1"],
    ]);
    expect(seen.filter((s) => (s as unknown[])[0] !== 200)).toEqual([
      [422, "upstream_rejected", null],
      [422, "upstream_rejected", null],
    ]);
    const r = await chat(group);
    const refused = r.status === 422 ? r : await chat(group);
    expect([refused.status, refused.headers.get("x-kvgate-attempts")]).toEqual([422, "1"]);
    await vi.waitFor(async () => expect(await backends(group)).toEqual([
      ["axum", 0, "closed"],
      ["ok", 0, "closed"],
    ]), EVENTUALLY);
  });

  it("a group of one's page is the request's too: its status, not charged", async () => {
    expect(await calls("page-alone", 3)).toEqual([
      [400, "upstream_rejected", "false"],
      [400, "upstream_rejected", "false"],
      [400, "upstream_rejected", "false"],
    ]);
    expect(await backends("page-alone")).toEqual([["page", 0, "closed"]]);
  });
});

describe("an engine's 500 that says the request's input is too large for it (review of failover)", () => {
  it("is the request's: the official SDK raises a 400 context_length_exceeded at once, with the engine's words, no backend is charged, and the next input is served", async () => {
    upstream.reset();
    let calls = 0;
    // The SDK's defaults: every 5xx retried twice.
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, fetch: (url, init) => (calls++, fetch(url, init)) });
    const seen: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      const err = await sdk.embeddings.create({ model: "embed-alone", input: "x ".repeat(3000) }).catch((e: unknown) => e);
      seen.push(err instanceof OpenAI.APIError ? [err.constructor.name, err.status, err.type, err.code, err.headers?.get("x-should-retry") ?? null, err.message] : String(err));
    }
    const refused = ["BadRequestError", 400, "invalid_request_error", "context_length_exceeded", "false", "400 input (3926 tokens) is too large to process. increase the physical batch size (current batch size: 512)"];
    expect(seen).toEqual([refused, refused]);
    expect([calls, upstream.stats("llamacpp-ubatch").requests]).toEqual([2, 2]);
    await vi.waitFor(async () => expect((await gw.status("embed-alone")).backends.map((b) => [b.id, b.failed, b.breaker.state])).toEqual([["llamacpp-ubatch", 0, "closed"]]), EVENTUALLY);
    const { response } = await sdk.embeddings.create({ model: "embed-alone", input: "short" }).withResponse();
    expect([response.status, response.headers.get("x-kvgate-backend")]).toEqual([200, "llamacpp-ubatch"]);
  });
});

describe("an upstream error that echoes the gateway's secrets", () => {
  // A misconfigured proxy or a debug build's error handler may put the request's headers in its
  // error: the deployment's bearer key (apiKeyEnv) and its secret headers (headersFromEnv, a
  // Cloudflare Access token) would reach the client in the message, code or extra fields passed on.
  // Base64's = and /: an HTML-safe JSON encoder writes them escaped (\u003d, \/).
  const GPU_KEY = `sk-gpu-${"k".repeat(12)}/${Date.now()}==`;
  const ACCESS_SECRET = `access-${"s".repeat(20)}-${Date.now()}`;
  let echoing: TestGateway;
  const secretDeployment = (behaviour: string) => ({ ...hostile(behaviour), apiKeyEnv: "GPU_KEY", headersFromEnv: { "cf-access-client-secret": "ACCESS_SECRET" } });

  beforeAll(async () => {
    echoing = await startTestGateway(
      {
        modelGroups: [
          { name: "echo-500", failover: { maxAttempts: 1 }, deployments: [secretDeployment("echo-headers-error:500")] },
          { name: "echo-400", failover: { maxAttempts: 1 }, deployments: [secretDeployment("echo-headers-error:400")] },
          { name: "echo-429", failover: { maxAttempts: 1 }, deployments: [secretDeployment("echo-headers-error:429")] },
          { name: "echo-escaped", failover: { maxAttempts: 1 }, deployments: [secretDeployment("echo-headers-error-escaped:500")] },
        ],
      },
      { GPU_KEY, ACCESS_SECRET },
    );
  });
  afterAll(() => echoing?.close());

  it.each(["echo-500", "echo-400", "echo-429", "echo-escaped"])("%s reaches the client and the request log with the secrets taken out", async (model) => {
    const behaviour = model === "echo-escaped" ? "echo-headers-error-escaped" : "echo-headers-error";
    const before = upstream.stats(behaviour).requests;
    const res = await fetch(`${echoing.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${echoing.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }] }),
    });
    const text = await res.text();
    // The upstream was asked, with the secrets: what it echoed held them.
    expect(upstream.stats(behaviour).requests).toBe(before + 1);
    expect(res.status).toBe(model === "echo-400" ? 400 : model === "echo-429" ? 429 : 502);
    expect(text).toContain("handler failed for request with headers");
    expect(text).not.toContain(GPU_KEY);
    expect(text).not.toContain(ACCESS_SECRET);
    await vi.waitFor(() => expect(echoing.logs.join("\n")).toContain(`"model":"${model}"`), EVENTUALLY);
    expect(echoing.logs.join("\n")).not.toContain(GPU_KEY);
    expect(echoing.logs.join("\n")).not.toContain(ACCESS_SECRET);
  });
});

describe("an upstream secret stored with whitespace around it (a trailing line break from .dev.vars, a paste)", () => {
  // The runtime's fetch sends a header value trimmed: what an upstream echoes is the trimmed value,
  // which is what must be taken out of what reaches the client.
  const GPU_KEY = `sk-gpu-padded-${Date.now()}`;
  const ACCESS_SECRET = `access-padded-${Date.now()}`;
  let padded: TestGateway;

  beforeAll(async () => {
    const deployment = { ...hostile("echo-headers-error:400"), apiKeyEnv: "GPU_KEY", headersFromEnv: { "cf-access-client-secret": "ACCESS_SECRET" } };
    padded = await startTestGateway({ modelGroups: [{ name: "echo-padded", failover: { maxAttempts: 1 }, deployments: [deployment] }] }, { GPU_KEY: `${GPU_KEY}\n`, ACCESS_SECRET: ` ${ACCESS_SECRET}\t` });
  });
  afterAll(() => padded?.close());

  it("is sent trimmed, and its echo reaches the client with the secrets taken out", async () => {
    const res = await fetch(`${padded.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${padded.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "echo-padded", messages: [{ role: "user", content: "hello" }] }),
    });
    const text = await res.text();
    expect(res.status).toBe(400);
    expect(text).toContain("handler failed for request with headers");
    expect(text).not.toContain(GPU_KEY);
    expect(text).not.toContain(ACCESS_SECRET);
  });
});

describe("an upstream key (apiKeyEnv) holding a line break inside", () => {
  let broken: TestGateway;

  beforeAll(async () => {
    broken = await startTestGateway({ modelGroups: [{ name: "broken-key", deployments: [{ ...hostile("ok", "broken-key-ok"), apiKeyEnv: "BROKEN_KEY" }] }] }, { BROKEN_KEY: "sk-broken-a\nsk-broken-b" });
  });
  afterAll(() => broken?.close());

  it("is the gateway's config error, its log naming the secret, never its value: not a server that cannot be reached", async () => {
    const before = upstream.stats("ok").requests;
    const res = await fetch(`${broken.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${broken.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "broken-key", messages: [{ role: "user", content: "hello" }] }),
    });
    const text = await res.text();
    expect({ status: res.status, code: (JSON.parse(text) as { error: { code: string } }).error.code }, text).toEqual({ status: 500, code: "config_invalid" });
    expect(text).toContain("modelGroups name a secret this Worker lacks or cannot send");
    expect(text).not.toContain("sk-broken");
    // Once the lines that speak of it are written (the request's, and the registry's refusal of the
    // seed, which comes later): read at once, a line that leaked it could come after the check.
    const written = (marker: string) => broken.logs.some((l) => l.includes(marker));
    await vi.waitFor(() => expect([written('"error_code":"config_invalid"'), written('"event":"seed_refused"')]).toEqual([true, true]), EVENTUALLY);
    expect(broken.logs.join("\n")).not.toContain("sk-broken");
    expect(broken.logs.join("\n")).toContain("apiKeyEnv names BROKEN_KEY, which holds a line break");
    expect(upstream.stats("ok").requests).toBe(before);
  });
});
