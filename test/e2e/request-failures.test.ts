import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { adminCall, issuedKey } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Failures that belong to one request must not be charged to the backends it tried (issue 10 §2):
 * a body every server crashes on, a long non-streamed generation, the gateway's own deadlines,
 * answers no healthy backend gives, and a connection a server closed behind the runtime's back.
 * Nor may a prompt a backend refused or failed on count as cached there.
 */

let upstream: HostileUpstream;
let fleet: Fleet;
let gw: TestGateway;

const hostile = (behaviour: string, id = behaviour.replace(/:.*/, "")) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b" });
const sim = (i: number) => ({ id: `sim-${i}`, baseUrl: fleet.urls[i] as string, model: "sim-7b" });
const breaker = { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 60_000 };
const ADMIN_KEY = `sk-admin-${"f".repeat(32)}`;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  fleet = await startFleet({ workers: 3, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  gw = await startTestGateway({
    modelGroups: [
      { name: "crashy", strategy: "round-robin", breaker, deployments: [hostile("crash-on", "a"), hostile("crash-on", "b"), hostile("crash-on", "c")] },
      { name: "crashy-behind-proxy", strategy: "round-robin", breaker, deployments: ["a", "b", "c"].map((id) => hostile("crash-on-behind-proxy", id)) },
      // A failing server, then one that refuses the gateway's key, then a healthy one.
      { name: "failing-then-keyless", strategy: "round-robin", breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("status:500", "failing"), hostile("status:401", "keyless"), hostile("ok")] },
      // Two servers still loading their model (503), then a ready one.
      { name: "loading-then-ready", strategy: "round-robin", breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("loading", "loading-a"), hostile("loading", "loading-b"), hostile("ok")] },
      // A server that rate-limits for 30 s, beside one that has room; and one alone.
      { name: "rate-limited-beside-ok", strategy: "round-robin", deployments: [hostile("rate-limited:30", "busy"), hostile("ok")] },
      { name: "rate-limited-alone", deployments: [hostile("rate-limited:30", "busy")] },
      // A Retry-After (20 s) within retryAfterCapMs, far longer than a loaded machine takes to answer.
      { name: "rate-limited-briefly-alone", failover: { retryAfterCapMs: 30_000 }, deployments: [hostile("rate-limited:20", "busy")] },
      { name: "rate-limited-beside-drained", failover: { retryAfterCapMs: 30_000 }, deployments: [hostile("rate-limited:20", "busy"), hostile("ok", "drained")] },
      // A Retry-After (2 s) within retryAfterCapMs (2 s) but past what is left of the request's 1.5 s, beside a backend with room.
      { name: "rate-limited-past-deadline", strategy: "round-robin", totalTimeoutMs: 1500, deployments: [hostile("rate-limited:2", "busy"), hostile("ok")] },
      // A Retry-After (5 s) within retryAfterCapMs, on a lone backend, with a fallback group a key may be kept from.
      { name: "rate-limited-with-fallback", failover: { retryAfterCapMs: 10_000 }, fallbacks: ["fallback-ok"], deployments: [hostile("rate-limited:5", "busy")] },
      { name: "fallback-ok", deployments: [hostile("ok", "fallback-ok")] },
      { name: "long-generation", strategy: "round-robin", firstByteTimeoutMs: 300, breaker, deployments: [sim(0), sim(1), sim(2)] },
      { name: "drip-total", totalTimeoutMs: 1000, failover: { maxAttempts: 1 }, deployments: [hostile("drip-body")] },
      // A non-streamed answer the gateway's own limits cut before its headers: the generation's, and the request's deadline.
      { name: "slow-generation", nonStreamTimeoutMs: 300, breaker, deployments: [hostile("slow-headers:5000", "slow")] },
      { name: "slow-total", totalTimeoutMs: 300, breaker, deployments: [hostile("slow-headers:5000", "slow")] },
      // A limit under the SDKs' timeout scaled 500× (1,200 ms): a server that crashes 600 ms into the generation, picked
      // first (round-robin), then one whose generation takes 840 ms, within the limit.
      { name: "crash-then-slow", strategy: "round-robin", nonStreamTimeoutMs: 900, breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("crash-mid-generation:600", "crashing"), hostile("slow-headers:840", "answering")] },
      // Groups with no total timeout whose backends fail, falling back to one whose own is 500 ms, on a backend that takes 3 s:
      // one backend (the group's object then refuses the request: no backend left), and two failing alike (past the attempts' bound).
      { name: "failing-to-bounded", fallbacks: ["bounded"], deployments: [hostile("status:502", "failing")] },
      { name: "failing-alike-to-bounded", failover: { maxAttempts: 2 }, fallbacks: ["bounded"], deployments: ["failing-1", "failing-2"].map((id) => hostile("status:502", id)) },
      { name: "bounded", totalTimeoutMs: 500, deployments: [hostile("slow-headers:3000", "slow")] },
      // Unbounded, falling back to a bounded group its 429 leaves, then to an unbounded one that answers in 2 s.
      { name: "failing-past-bounded", failover: { maxAttempts: 5 }, fallbacks: ["bounded-busy", "unbounded-slow"], deployments: [hostile("status:502", "failing-3")] },
      { name: "bounded-busy", totalTimeoutMs: 800, deployments: [hostile("rate-limited:30", "busy-30")] },
      { name: "unbounded-slow", deployments: [hostile("slow-headers:2000", "slow-2s")] },
      // The same path, to an unbounded fallback whose first backend (round-robin) crashes 1 s into the generation.
      { name: "failing-past-bounded-to-crash", failover: { maxAttempts: 5 }, fallbacks: ["bounded-busy", "crash-then-ok"], deployments: [hostile("status:502", "failing-4")] },
      { name: "crash-then-ok", strategy: "round-robin", breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [hostile("crash-mid-generation:1000", "crashing-1s"), hostile("ok", "fine")] },
      // The same path with nonStreamTimeoutMs: a fallback of 800 ms its 429 leaves, then one of the default, answering in 2 s.
      { name: "failing-past-short-generation", failover: { maxAttempts: 5 }, fallbacks: ["short-generation-busy", "unbounded-slow"], deployments: [hostile("status:502", "failing-5")] },
      { name: "short-generation-busy", nonStreamTimeoutMs: 800, deployments: [hostile("rate-limited:30", "busy-30-short")] },
      { name: "wrong-model", strategy: "round-robin", breaker, deployments: [hostile("wrong-model"), hostile("ok")] },
      { name: "no-content", strategy: "round-robin", breaker, deployments: [hostile("status:204", "no-content"), hostile("ok")] },
      { name: "keepalive", deployments: [hostile("keepalive-lie")] },
      { name: "stored-elsewhere", breaker, deployments: [hostile("response-not-found")] },
      // A backend that holds the stored responses it made and fails, before one that holds none of them.
      { name: "holder-failing", breaker, fallbacks: ["holding-none"], deployments: [hostile("status:500", "holder")] },
      { name: "holding-none", breaker, deployments: [hostile("response-not-found", "holding-none")] },
      { name: "stored-elsewhere-unnamed", strategy: "round-robin", breaker, deployments: ["a", "b", "c"].map((id) => hostile("response-not-found-unnamed", id)) },
      { name: "rejecting", deployments: [hostile("context-exceeded")] },
      { name: "failing", failover: { maxAttempts: 1 }, deployments: [hostile("crash-on:hello", "failing")] },
      // Servers that send a stream's headers before its first token, as vLLM and SGLang do.
      { name: "no-first-token", strategy: "round-robin", firstByteTimeoutMs: 300, breaker, deployments: [hostile("headers-first", "hung"), hostile("ok")] },
      { name: "no-first-token-alone", firstByteTimeoutMs: 300, failover: { maxAttempts: 1 }, deployments: [hostile("headers-first", "hung")] },
      { name: "late-first-token", firstByteTimeoutMs: 5000, failover: { maxAttempts: 1 }, deployments: [hostile("headers-first:600", "late")] },
      // vLLM's Responses API stream: response.created and response.in_progress before the first token.
      { name: "responses-no-first-token", strategy: "round-robin", firstByteTimeoutMs: 300, breaker, deployments: [hostile("responses-created-first", "queued"), sim(0)] },
      { name: "responses-late-first-token", firstByteTimeoutMs: 5000, failover: { maxAttempts: 1 }, deployments: [hostile("responses-created-first:600", "late")] },
      // A server behind a proxy that writes SSE comments while the request waits, then its tokens.
      { name: "comments-before-token", strategy: "round-robin", firstByteTimeoutMs: 300, breaker, deployments: [hostile("comments-first:2000", "chatty"), hostile("ok")] },
      { name: "comments-then-token", firstByteTimeoutMs: 5000, failover: { maxAttempts: 1 }, deployments: [hostile("comments-first:300", "chatty")] },
    ],
  }, { KVGATE_ADMIN_KEY: ADMIN_KEY });
});
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  await upstream?.close();
});

function chat(model: string, body: Record<string, unknown> = {}, key = gw.key): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 4, ...body }),
  });
}

const breakers = async (group: string) => Object.fromEntries((await gw.status(group)).backends.map((b) => [b.id, b.breaker.state]));

describe("a failure that follows the request from backend to backend is the request's", () => {
  it("is not retried past the second backend, and opens no healthy backend's breaker", async () => {
    upstream.reset();
    for (let i = 0; i < 4; i++) {
      const res = await chat("crashy", { messages: [{ role: "user", content: `CRASH ${i}` }] });
      expect(res.status).toBe(502);
      expect(res.headers.get("x-kvgate-attempts")).toBe("2");
      await res.text();
    }
    expect(upstream.stats("crash-on").requests).toBe(8);
    await vi.waitFor(async () => expect(await gw.inFlight("crashy")).toBe(0), EVENTUALLY);
    expect(await breakers("crashy")).toEqual({ a: "closed", b: "closed", c: "closed" });
    const fine = await chat("crashy");
    expect(fine.status).toBe(200);
    await fine.text();
  });
});

describe("a 503 that says no more than a 500 does", () => {
  it("follows the request as a 500 does: a body every engine crashes on, behind a proxy that answers 503, opens no breaker", async () => {
    upstream.reset();
    for (let i = 0; i < 3; i++) {
      const res = await chat("crashy-behind-proxy", { messages: [{ role: "user", content: `CRASH ${i}` }] });
      expect([res.status, res.headers.get("x-kvgate-attempts"), res.headers.get("x-should-retry")]).toEqual([502, "2", "false"]);
      await res.text();
    }
    await vi.waitFor(async () => expect(await gw.inFlight("crashy-behind-proxy")).toBe(0), EVENTUALLY);
    expect(await breakers("crashy-behind-proxy")).toEqual({ a: "closed", b: "closed", c: "closed" });
    const fine = await chat("crashy-behind-proxy");
    expect(fine.status).toBe(200);
    await fine.text();
  });
});

describe("a failure that follows the request, to the official SDK", () => {
  it("is told not to retry it: one request crashes two backends, not two on each of the SDK's three tries", async () => {
    upstream.reset();
    let calls = 0;
    // The SDK's defaults: every 5xx retried twice.
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, fetch: (url, init) => (calls++, fetch(url, init)) });
    const err = await sdk.chat.completions.create({ model: "crashy", messages: [{ role: "user", content: "CRASH sdk" }], max_tokens: 4 }).catch((e: unknown) => e);
    if (!(err instanceof OpenAI.InternalServerError)) throw err;
    expect([err.status, err.headers?.get("x-should-retry"), err.headers?.get("x-kvgate-attempts")]).toEqual([502, "false", "2"]);
    expect(calls).toBe(1);
    expect(upstream.stats("crash-on").requests).toBe(2);
    await vi.waitFor(async () => expect(await gw.inFlight("crashy")).toBe(0), EVENTUALLY);
  });

  it("a failure on a lone backend says nothing of the request: the SDK may try again", async () => {
    const res = await chat("failing");
    expect(res.status).toBe(502);
    expect(res.headers.get("x-should-retry")).toBeNull();
    await res.text();
  });
});

describe("a failure no request can cause never follows the request", () => {
  it("a backend refusing the gateway's key after another failed: the failure is not the request's, and a third backend answers", async () => {
    const res = await chat("failing-then-keyless");
    expect(res.status, await res.clone().text()).toBe(200);
    expect([res.headers.get("x-kvgate-attempts"), res.headers.get("x-kvgate-backend")]).toEqual(["3", "ok"]);
    await res.text();
    // Both failures are their backends' own: each is charged.
    await vi.waitFor(async () => {
      const failed = Object.fromEntries((await gw.status("failing-then-keyless")).backends.map((b) => [b.id, b.failed]));
      expect(failed).toMatchObject({ failing: 1, keyless: 1 });
    }, EVENTUALLY);
  });
});

describe("a 503 is the server's state, never the request's", () => {
  it("two servers still loading their model: the request goes on to a third that is ready, and both are charged", async () => {
    const res = await chat("loading-then-ready");
    expect(res.status, await res.clone().text()).toBe(200);
    expect([res.headers.get("x-kvgate-attempts"), res.headers.get("x-kvgate-backend")]).toEqual(["3", "ok"]);
    await res.text();
    await vi.waitFor(async () => {
      const failed = Object.fromEntries((await gw.status("loading-then-ready")).backends.map((b) => [b.id, b.failed]));
      expect(failed).toEqual({ "loading-a": 1, "loading-b": 1, ok: 0 });
    }, EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("loading-then-ready")).toBe(0), EVENTUALLY);
  });
});

describe("a backend that answered 429 with a Retry-After", () => {
  it("is spared for that long while another backend has room, and the request that met its 429 goes on to that one at once", async () => {
    upstream.reset();
    const answers: [number, string | null, string | null][] = [];
    for (let i = 0; i < 6; i++) {
      const res = await chat("rate-limited-beside-ok");
      answers.push([res.status, res.headers.get("x-kvgate-backend"), res.headers.get("x-kvgate-attempts")]);
      await res.text();
    }
    // Its Retry-After (30 s) is past retryAfterCapMs: not waited for, and no other client's to meet.
    expect(answers.filter(([s]) => s !== 200)).toEqual([]);
    expect(answers.filter(([, , a]) => a === "2")).toEqual([[200, "ok", "2"]]);
    expect(upstream.stats("rate-limited").requests).toBe(1);
    await vi.waitFor(async () => expect(await gw.inFlight("rate-limited-beside-ok")).toBe(0), EVENTUALLY);
    expect((await breakers("rate-limited-beside-ok")).busy).toBe("closed");
    // Why it gets no requests, as the status shows it: the 30 s its 429 asked for.
    const busy = (await gw.status("rate-limited-beside-ok")).backends.find((b) => b.id === "busy");
    expect(busy?.restingUntil).toBeGreaterThan(Date.now() + 20_000);
  });

  it("alone, its Retry-After is not waited out for nothing: with no other backend to try, the client gets it at once", async () => {
    const startedAt = Date.now();
    const res = await chat("rate-limited-briefly-alone");
    await res.text();
    expect([res.status, res.headers.get("retry-after")]).toEqual([429, "20"]);
    // Waited out, its 20 s (within retryAfterCapMs) would have come before the same 429: the bound
    // leaves a loaded machine 15 s (with 5 s and 4 s, a 4 s stall failed it).
    expect(Date.now() - startedAt).toBeLessThan(15_000);
    await vi.waitFor(async () => expect(await gw.inFlight("rate-limited-briefly-alone")).toBe(0), EVENTUALLY);
  });

  it("beside a backend drained for a restart, is as alone: the client gets its 429 at once", async () => {
    expect((await adminCall(gw.url, ADMIN_KEY, "POST", "/groups/rate-limited-beside-drained/deployments/drained/drain")).status).toBe(200);
    const startedAt = Date.now();
    const res = await chat("rate-limited-beside-drained");
    await res.text();
    expect([res.status, res.headers.get("x-kvgate-backend")]).toEqual([429, "busy"]);
    expect(Date.now() - startedAt).toBeLessThan(15_000);
  });

  it("a Retry-After within retryAfterCapMs that the request's totalTimeoutMs leaves no time for: the next backend is asked at once, not the 429 answered", async () => {
    const res = await chat("rate-limited-past-deadline");
    await res.text();
    // Before, the wait did not fit, so failover ended: the client got the 429 after 1 attempt.
    expect([res.status, res.headers.get("x-kvgate-backend"), res.headers.get("x-kvgate-attempts")]).toEqual([200, "ok", "2"]);
    await vi.waitFor(async () => expect(await gw.inFlight("rate-limited-past-deadline")).toBe(0), EVENTUALLY);
  });

  it("with a fallback group the key may not use, is as alone: the key gets its 429 at once, its Retry-After not waited out", async () => {
    upstream.reset();
    const { key } = await issuedKey(gw.url, ADMIN_KEY, { models: ["rate-limited-with-fallback"] });
    const startedAt = Date.now();
    const res = await chat("rate-limited-with-fallback", {}, key);
    await res.text();
    expect([res.status, res.headers.get("retry-after"), res.headers.get("x-kvgate-attempts")]).toEqual([429, "5", "1"]);
    expect(upstream.stats("rate-limited").requests).toBe(1);
    expect(upstream.stats("ok").requests).toBe(0);
    // Its 5 s would have been waited out for a fallback it may not use (found by review).
    expect(Date.now() - startedAt).toBeLessThan(2500);
    await vi.waitFor(async () => expect(await gw.inFlight("rate-limited-with-fallback")).toBe(0), EVENTUALLY);
  });

  it("alone, is still asked: the client gets its 429 and its Retry-After, and the slot is freed", async () => {
    upstream.reset();
    for (let i = 0; i < 2; i++) {
      const res = await chat("rate-limited-alone");
      expect([res.status, res.headers.get("retry-after")]).toEqual([429, "30"]);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("upstream_rate_limited");
    }
    expect(upstream.stats("rate-limited").requests).toBe(2);
    await vi.waitFor(async () => expect(await gw.inFlight("rate-limited-alone")).toBe(0), EVENTUALLY);
  });
});

describe("a stream's first token, not an SSE comment before it, ends firstByteTimeoutMs", () => {
  it("comments for longer than the limit: the backend failed, nothing reached the client, another answers", async () => {
    const res = await chat("comments-before-token", { stream: true });
    expect(res.status).toBe(200);
    expect([res.headers.get("x-kvgate-backend"), res.headers.get("x-kvgate-attempts")]).toEqual(["ok", "2"]);
    const text = await res.text();
    expect(text).not.toContain(": keep-alive");
    expect(text).toContain("data: [DONE]");
  });

  it("comments, then a token within the limit: the stream passes whole, comments included", async () => {
    const res = await chat("comments-then-token", { stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text.startsWith(": keep-alive\n\n")).toBe(true);
    expect(text).toContain("data: [DONE]");
  });
});

describe("a non-streamed request is answered when its generation ends", () => {
  it("is not timed out by firstByteTimeoutMs, retried, or charged to its backend", async () => {
    const res = await chat("long-generation", { kvgate_sim: { first_byte_delay_ms: 1000 } });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-attempts")).toBe("1");
    await res.json();
    await vi.waitFor(async () => expect(await gw.inFlight("long-generation")).toBe(0), EVENTUALLY);
    const s = await gw.status("long-generation");
    expect(s.backends.reduce((n, b) => n + b.failed, 0)).toBe(0);
    expect(s.backends.reduce((n, b) => n + b.completed, 0)).toBe(1);
  });
});

describe("totalTimeoutMs bounds a non-streamed body too", () => {
  it("cuts a body that drips past the deadline, and the cut is no verdict on the backend", async () => {
    upstream.reset();
    const started = Date.now();
    const res = await chat("drip-total");
    const body = await res.text().then(
      () => "complete",
      () => "cut",
    );
    expect(body).toBe("cut");
    expect(Date.now() - started).toBeLessThan(5000);
    await vi.waitFor(() => expect(upstream.stats("drip-body").open).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("drip-total")).toBe(0), EVENTUALLY);
    const b = (await gw.status("drip-total")).backends[0];
    expect(b?.completed).toBe(0);
    expect(b?.failed).toBe(0);
  });

  it.each(["failing-to-bounded", "failing-alike-to-bounded"])("a fallback group's own bounds the attempts it serves, as when its model is asked directly: %s", async (model) => {
    const started = Date.now();
    const res = await chat(model);
    await res.text();
    // Before, the request's deadline was its own group's (none): 200 after the backend's 3 s.
    expect([res.status, res.headers.get("x-kvgate-group")]).toEqual([504, "bounded"]);
    expect(Date.now() - started).toBeLessThan(2500);
    await vi.waitFor(async () => expect(await gw.inFlight("bounded")).toBe(0), EVENTUALLY);
  });

  it.each([
    ["totalTimeoutMs", "failing-past-bounded"],
    ["nonStreamTimeoutMs", "failing-past-short-generation"],
  ])("a fallback's %s ends with it: the next fallback, unbounded as the group asked for, serves", async (_limit, model) => {
    const res = await chat(model);
    await res.text();
    expect([res.status, res.headers.get("x-kvgate-group")]).toEqual([200, "unbounded-slow"]);
  });

  it("a fallback's totalTimeoutMs, its timer too, ends with it: the next fallback's backend that crashes is retried on its other", async () => {
    const res = await chat("failing-past-bounded-to-crash");
    await res.text();
    expect([res.status, res.headers.get("x-kvgate-group"), res.headers.get("x-kvgate-backend")]).toEqual([200, "crash-then-ok", "fine"]);
  });
});

describe("a 504 the gateway does not retry, to the official SDK", () => {
  it.each([
    ["nonStreamTimeoutMs", "slow-generation"],
    ["totalTimeoutMs", "slow-total"],
  ])("past %s: told not to retry it either, so the generation runs once, not on each of the SDK's three tries", async (_limit, model) => {
    upstream.reset();
    let calls = 0;
    // The SDK's defaults: every 5xx retried twice.
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, fetch: (url, init) => (calls++, fetch(url, init)) });
    const err = await sdk.chat.completions.create({ model, messages: [{ role: "user", content: "a long essay" }], max_tokens: 4 }).catch((e: unknown) => e);
    if (!(err instanceof OpenAI.APIError)) throw err;
    expect([err.status, err.headers?.get("x-should-retry"), calls, upstream.stats("slow-headers").requests]).toEqual([504, "false", 1, 1]);
    await vi.waitFor(async () => expect(await gw.inFlight(model)).toBe(0), EVENTUALLY);
  });
});

describe("a non-streamed request's generations share its nonStreamTimeoutMs, to the official SDK", () => {
  it("a retry after a backend crashed mid-generation gets what is left of it: the 504 comes before the SDK's timeout, which would send the generation again", async () => {
    upstream.reset();
    // Its routing object up before the clock starts: a cold start is no part of the bound.
    await gw.inFlight("crash-then-slow");
    let calls = 0;
    // The SDK's defaults (timeout 10 min, a timed-out call sent again twice) scaled 500×. The group's limit is 300 ms under
    // it, not the default's minute scaled (120 ms): the gateway's own milliseconds (routing, a second attempt) are not scaled.
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, timeout: 1200, maxRetries: 2, fetch: (url, init) => (calls++, fetch(url, init)) });
    const outcome = await sdk.chat.completions.create({ model: "crash-then-slow", messages: [{ role: "user", content: "a long essay" }], max_tokens: 4 }).then(
      () => "answered",
      (e: unknown) => (e instanceof OpenAI.APIError ? `${e.status ?? e.constructor.name} x-should-retry ${e.headers?.get("x-should-retry")}` : e),
    );
    // Before, the retry got a whole 900 ms of its own: its answer would come after 1,440 ms, past the SDK's 1,200, which sent
    // the request again twice, each time to both backends (APIConnectionTimeoutError after 3 calls, 3 requests each).
    expect([outcome, calls, upstream.stats("crash-mid-generation").requests, upstream.stats("slow-headers").requests]).toEqual(["504 x-should-retry false", 1, 1, 1]);
    await vi.waitFor(async () => expect(await gw.inFlight("crash-then-slow")).toBe(0), EVENTUALLY);
  });
});

describe("answers no healthy backend gives count against it", () => {
  it.each([
    ["a 404 for its own model", "wrong-model", "wrong-model"],
    ["a 204", "no-content", "no-content"],
  ])("%s: the request fails over, and the backend's breaker opens", async (_name, group, bad) => {
    for (let i = 0; i < 4; i++) {
      const res = await chat(group);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvgate-backend")).toBe("ok");
      await res.text();
    }
    await vi.waitFor(async () => expect((await breakers(group))[bad]).toBe("open"), EVENTUALLY);
  });
});

describe("a 404 is the request's only when it is about what the request refers to", () => {
  it("a chat request's previous_response_id (a field chat ignores) that the model-not-found message happens to hold does not make that 404 the request's", async () => {
    // Round-robin over wrong-model and ok: of two requests, one is sent to wrong-model first.
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "wrong-model", previous_response_id: "model", messages: [{ role: "user", content: "hello" }], max_tokens: 4 }),
      });
      expect([res.status, res.headers.get("x-kvgate-backend")]).toEqual([200, "ok"]);
      await res.text();
    }
  });
});

describe("a stream's time to its first token is bounded by firstByteTimeoutMs, whenever its headers came", () => {
  /** A streamed chat, read to its end; a body that never ends fails the test instead of hanging it. */
  async function streamed(model: string): Promise<{ status: number; attempts: string | null; backend: string | null; body: string }> {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "hello" }], max_tokens: 4 }),
      signal: AbortSignal.timeout(4000),
    });
    return { status: res.status, attempts: res.headers.get("x-kvgate-attempts"), backend: res.headers.get("x-kvgate-backend"), body: await res.text() };
  }

  it("a backend that sent its headers and no token in time failed: the request goes to the next, and its breaker learns it", async () => {
    upstream.reset();
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await streamed("no-first-token"));
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.backend).toBe("ok");
      expect(a.body).toContain("data: [DONE]");
    }
    // Round-robin put every other request on the hung server first.
    expect(answers.filter((a) => a.attempts === "2").length).toBeGreaterThanOrEqual(1);
    await vi.waitFor(() => expect(upstream.stats("headers-first").open).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("no-first-token")).toBe(0), EVENTUALLY);
    expect((await gw.status("no-first-token")).backends.find((b) => b.id === "hung")?.failed).toBeGreaterThanOrEqual(1);
  });

  it("with nowhere else to go, the client gets a 504 naming the limit, and the slot is freed", async () => {
    upstream.reset();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "no-first-token-alone", stream: true, messages: [{ role: "user", content: "hello" }] }),
      signal: AbortSignal.timeout(4000),
    });
    expect(res.status).toBe(504);
    const body = (await res.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("timeout_error");
    expect(body.error.message).toMatch(/within 300 ms/);
    await vi.waitFor(() => expect(upstream.stats("headers-first").open).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("no-first-token-alone")).toBe(0), EVENTUALLY);
  });

  it("a first token within the limit is answered as ever, after headers that came long before it", async () => {
    const a = await streamed("late-first-token");
    expect(a.status).toBe(200);
    expect(a.attempts).toBe("1");
    expect(a.body).toContain("data: [DONE]");
  });
});

describe("a Responses API stream's first token is its first event after response.created and response.in_progress", () => {
  const client = () => new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 4000 });

  /** A streamed response through the SDK, read to its end: its events' types, and the routing headers. */
  async function streamed(model: string): Promise<{ types: string[]; attempts: string | null; backend: string | null; ttftMs: number }> {
    const sentAt = performance.now();
    const { data: stream, response } = await client().responses.create({ model, input: "hello", stream: true }, { signal: AbortSignal.timeout(4000) }).withResponse();
    const ttftMs = performance.now() - sentAt;
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    return { types, attempts: response.headers.get("x-kvgate-attempts"), backend: response.headers.get("x-kvgate-backend"), ttftMs };
  }

  it("a backend that sent those (as vLLM does while the request waits for its engine) and no token in time failed: the request goes to the next", async () => {
    upstream.reset();
    const answers = [];
    for (let i = 0; i < 2; i++) answers.push(await streamed("responses-no-first-token"));
    for (const a of answers) {
      expect(a.backend).toBe("sim-0");
      expect(a.types.at(-1)).toBe("response.completed");
    }
    // Round-robin put a request on the stalled server first.
    expect(answers.filter((a) => a.attempts === "2").length).toBeGreaterThanOrEqual(1);
    await vi.waitFor(() => expect(upstream.stats("responses-created-first").open).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("responses-no-first-token")).toBe(0), EVENTUALLY);
    expect((await gw.status("responses-no-first-token")).backends.find((b) => b.id === "queued")?.failed).toBeGreaterThanOrEqual(1);
  });

  it("a first token within the limit: every event reaches the client, response.created first, once the token came", async () => {
    const a = await streamed("responses-late-first-token");
    expect(a.attempts).toBe("1");
    expect(a.types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    // The answer's headers waited for the token, as a chat stream's do: its TTFT is the token's.
    expect(a.ttftMs).toBeGreaterThanOrEqual(550);
    await vi.waitFor(async () => expect((await gw.status("responses-late-first-token")).backends[0]?.ttftEwmaMs).toBeGreaterThanOrEqual(550), EVENTUALLY);
  });
});

describe("a 404 about what the request refers to, not the model", () => {
  it("is the request's: passed on as the backend said it, and no verdict on the backend", async () => {
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${gw.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "stored-elsewhere", input: "and then?", previous_response_id: "resp_elsewhere" }),
      });
      expect(res.status).toBe(404);
      expect(res.headers.get("x-kvgate-attempts")).toBe("1");
      const body = (await res.json()) as { error: { type: string; param: string | null; message: string } };
      expect(body.error).toMatchObject({ type: "invalid_request_error", param: "response_id", message: "Response with id 'resp_elsewhere' not found." });
    }
    await vi.waitFor(async () => expect(await gw.inFlight("stored-elsewhere")).toBe(0), EVENTUALLY);
    const b = (await gw.status("stored-elsewhere")).backends[0];
    expect(b?.failed).toBe(0);
    expect(b?.breaker.state).toBe("closed");
  });
});

describe("a 404 for the stored response a follow-up refers to, from a backend tried after another failed", () => {
  it("says only that this one lacks it: the failure before is the answer, one the SDK tries again, and its backend's", async () => {
    upstream.reset();
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const err = await sdk.responses.create({ model: "holder-failing", input: "and then?", previous_response_id: "resp_elsewhere" }).catch((e: unknown) => e);
    if (!(err instanceof OpenAI.APIError)) throw err;
    // Both were tried: the failing holder, then its fallback, which holds none.
    expect(upstream.stats("response-not-found").requests).toBe(1);
    expect([err.status, err.param, err.code, err.headers?.get("x-should-retry")]).toEqual([502, null, "upstream_error", null]);
    await vi.waitFor(async () => expect(await gw.inFlight("holder-failing")).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect((await gw.status("holder-failing")).backends.map((b) => [b.id, b.failed])).toEqual([["holder", 1]]), EVENTUALLY);
    expect((await gw.status("holding-none")).backends.map((b) => [b.id, b.failed])).toEqual([["holding-none", 0]]);
  });
});

describe("a 404 naming a parameter, from a backend tried after another failed, for a request that refers to no stored response", () => {
  it("is that backend's answer, passed on as it said it: not the failure before", async () => {
    upstream.reset();
    const res = await chat("holder-failing");
    // Both were tried: the failing holder, then its fallback, which answers the 404.
    expect(upstream.stats("response-not-found").requests).toBe(1);
    const body = (await res.json()) as { error: { param: string | null; message: string } };
    expect([res.status, body.error.param, body.error.message]).toEqual([404, "response_id", "Response with id 'resp_elsewhere' not found."]);
    await vi.waitFor(async () => expect(await gw.inFlight("holder-failing")).toBe(0), EVENTUALLY);
  });
});

describe("a 404 that names the stored response the request refers to, with no param", () => {
  it("is the request's too: passed on, tried on one backend, and charged to none", async () => {
    upstream.reset();
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${gw.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "stored-elsewhere-unnamed", input: "and then?", previous_response_id: `resp_gone${i}` }),
      });
      const body = (await res.json()) as { error: { type: string; message: string } };
      expect([res.status, res.headers.get("x-kvgate-attempts")]).toEqual([404, "1"]);
      expect(body.error).toMatchObject({ type: "invalid_request_error", message: `Response with id 'resp_gone${i}' not found.` });
    }
    expect(upstream.stats("response-not-found-unnamed").requests).toBe(3);
    await vi.waitFor(async () => expect(await gw.inFlight("stored-elsewhere-unnamed")).toBe(0), EVENTUALLY);
    const backends = (await gw.status("stored-elsewhere-unnamed")).backends;
    expect(backends.map((b) => [b.id, b.failed, b.breaker.state])).toEqual([["a", 0, "closed"], ["b", 0, "closed"], ["c", 0, "closed"]]);
  });
});

describe("a connection the upstream closed behind the runtime's back", () => {
  it("is retried once on the same backend and is no verdict on it", async () => {
    upstream.reset();
    for (let i = 0; i < 4; i++) {
      const res = await chat("keepalive", { stream: i % 2 === 1 });
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvgate-attempts")).toBe("1");
      await res.text();
    }
    await vi.waitFor(async () => expect(await gw.inFlight("keepalive")).toBe(0), EVENTUALLY);
    const b = (await gw.status("keepalive")).backends[0];
    expect(b?.failed).toBe(0);
    expect(b?.completed).toBe(4);
  });
});

describe("a backend learns a prompt's prefix only from a request it served", () => {
  it.each([
    ["rejected (400)", "rejecting"],
    ["failed (500)", "failing"],
  ])("%s: the same prompt again is no prefix-hit there", async (_name, group) => {
    const messages = [{ role: "user", content: `hello ${"the same long prompt ".repeat(40)}` }];
    const first = await chat(group, { messages });
    expect(first.status).toBeGreaterThanOrEqual(400);
    await first.text();
    const again = await chat(group, { messages });
    await again.text();
    expect(again.headers.get("x-kvgate-reason")).not.toBe("prefix-hit");
    expect(again.headers.get("x-kvgate-prefix-blocks")).toMatch(/^0\//);
  });
});
