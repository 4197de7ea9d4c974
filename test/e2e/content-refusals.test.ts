import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { metricsText, sample } from "../support/metrics-scrape.ts";
import { connect, opened } from "../support/websocket-client.ts";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A 401 or 403 need not be the backend's refusal of the gateway's key: a firewall or an ingress in
 * front of the engines (Cloudflare's WAF on the Tunnel's hostname, ModSecurity, Envoy's ext_authz)
 * refuses a request by what its body holds, on every backend alike. Charged to each backend, one
 * client's prompt would open every breaker of the group; a key refused on one server among others
 * that answer is still that server's.
 */

let upstream: HostileUpstream;
let sockets: WebSocketUpstream;
let gw: TestGateway;

const hostile = (behaviour: string, id: string) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "chat-7b" });
// The breaker as it ships (5 failures in a row open it), kept open once opened so the test reads it so.
const breaker = { openMs: 60_000, probeIntervalMs: 60_000 };
const BLOCKED = "DROP TABLE users; -- explain this SQL";
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  sockets = await startWebSocketUpstream();
  gw = await startTestGateway({
    modelGroups: [
      // Three engines behind a WAF that refuses SQL in a body; the failover defaults.
      { name: "behind-waf", strategy: "round-robin", breaker, deployments: ["a", "b", "c"].map((id) => hostile("waf", id)) },
      // A server whose Access token is missing (its proxy's 403 on every request) beside two serving.
      { name: "one-keyless", strategy: "round-robin", breaker, deployments: [hostile("status:403", "keyless"), hostile("ok", "ok-1"), hostile("ok", "ok-2")] },
      // The same with failover off: no second backend is asked whether the 403 was the request's.
      { name: "one-keyless-no-failover", strategy: "round-robin", breaker, failover: { maxAttempts: 1 }, deployments: [hostile("status:403", "nf-keyless"), hostile("ok", "nf-ok-1"), hostile("ok", "nf-ok-2")] },
      // An engine behind a WAF beside one that is down (its breaker opens first, and it rests): the WAF's one is the group's last.
      { name: "waf-beside-resting", strategy: "round-robin", breaker, deployments: [hostile("waf", "r-waf"), hostile("status:500", "r-down")] },
      // A realtime server whose Access token is missing beside two that serve, failover off.
      { name: "realtime-one-keyless-no-failover", strategy: "round-robin", breaker, failover: { maxAttempts: 1 }, deployments: [{ id: "rk", baseUrl: `${sockets.url}/refuse:403`, model: "chat-7b" }, ...["re1", "re2"].map((id) => ({ id, baseUrl: `${sockets.url}/echo`, model: "chat-7b" }))] },
      // Three realtime servers behind a proxy that refuses every handshake (as one refuses a query it judges) with a 403 that says why.
      { name: "realtime-refused", strategy: "round-robin", breaker, deployments: ["p", "q", "r"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:403`, model: "chat-7b" })) },
      // The engines' key rotated, the Worker's secret still the old one: each engine's own 401 (vLLM's, SGLang's, llama.cpp's), and a fallback group.
      { name: "all-keyless", strategy: "round-robin", breaker, fallbacks: ["served"], deployments: ["k1", "k2", "k3"].map((id) => hostile("status:401", id)) },
      // Every engine behind Cloudflare Access, the Worker's Access token wrong: Access's 403 on each, and a fallback group.
      { name: "all-forbidden", strategy: "round-robin", breaker, fallbacks: ["served"], deployments: ["f1", "f2", "f3"].map((id) => hostile("status:403", id)) },
      { name: "served", breaker, deployments: [hostile("ok", "served-1")] },
      // Realtime alike: every handshake refused with a 403 that says why, and a group that serves.
      { name: "realtime-forbidden", strategy: "round-robin", breaker, fallbacks: ["realtime-served"], deployments: ["rf1", "rf2", "rf3"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:403`, model: "chat-7b" })) },
      { name: "realtime-served", breaker, deployments: [{ id: "echo-1", baseUrl: `${sockets.url}/echo`, model: "chat-7b" }] },
      // One server with its Access token missing (403) beside one that is busy (its one slot held by a slow answer).
      // Two engines behind a WAF beside one that is busy (its one slot held by a slow answer).
      { name: "waf-beside-busy", strategy: "round-robin", breaker, deployments: [{ ...hostile("slow-headers:4000", "w-busy"), maxInFlight: 1 }, hostile("waf", "w1"), hostile("waf", "w2")] },
      { name: "forbidden-beside-busy", strategy: "round-robin", breaker, deployments: [{ ...hostile("slow-headers:4000", "busy"), maxInFlight: 1 }, hostile("status:403", "no-token")] },
      // Every engine behind a proxy that refuses the gateway (its Access token wrong), and a fallback group whose one server is busy (its one slot held).
      { name: "forbidden-then-full", strategy: "round-robin", breaker, fallbacks: ["one-slot"], deployments: ["ff1", "ff2", "ff3"].map((id) => hostile("status:403", id)) },
      { name: "one-slot", breaker, deployments: [{ ...hostile("slow-headers:4000", "slot"), maxInFlight: 1 }] },
      // Two servers behind a proxy refusing every request and one at its in-flight limit, then the full fallback group.
      { name: "forbidden-busy-then-full", strategy: "round-robin", breaker, fallbacks: ["one-slot"], deployments: [{ ...hostile("slow-headers:4000", "fbf-busy"), maxInFlight: 1 }, ...["fbf1", "fbf2"].map((id) => hostile("status:403", id))] },
      // Realtime alike: every handshake refused with a 403, and a fallback group whose one server holds a session (its one slot).
      { name: "realtime-forbidden-then-full", strategy: "round-robin", breaker, fallbacks: ["realtime-one-slot"], deployments: ["rff1", "rff2", "rff3"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:403`, model: "chat-7b" })) },
      // A server whose Access token is missing beside one that is busy, and fallback groups: two servers behind a proxy refusing the gateway, then one that serves.
      { name: "keyless-beside-busy-then", strategy: "round-robin", breaker, fallbacks: ["forbidden-pair", "served"], deployments: [{ ...hostile("slow-headers:4000", "lb-busy"), maxInFlight: 1 }, hostile("status:403", "lb-keyless")] },
      { name: "forbidden-pair", strategy: "round-robin", breaker, deployments: ["fp1", "fp2"].map((id) => hostile("status:403", id)) },
      { name: "realtime-one-slot", breaker, deployments: [{ id: "rslot", baseUrl: `${sockets.url}/echo`, model: "chat-7b", maxInFlight: 1 }] },
    ],
  }, { KVGATE_ADMIN_KEY: adminKey });
});
afterAll(async () => {
  await gw?.close();
  await sockets?.close();
  await upstream?.close();
});

function chat(model: string, content: string): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content }], max_tokens: 4 }),
  });
}

/** Two calls of a prompt the WAF refuses through the SDK at its defaults (a 5xx retried twice): what each raised, and how many requests it sent. */
async function twoBlockedCalls(model: string): Promise<{ sdk: OpenAI; answers: unknown[]; calls: number }> {
  let sent = 0;
  const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, fetch: (url, init) => (sent++, fetch(url, init)) });
  const answers: unknown[] = [];
  for (let i = 0; i < 2; i++) {
    const err = await sdk.chat.completions.create({ model, messages: [{ role: "user", content: BLOCKED }], max_tokens: 4 }).catch((e: unknown) => e);
    answers.push(err instanceof OpenAI.APIError ? [err.status, err.headers?.get("x-should-retry")] : err);
  }
  return { sdk, answers, calls: sent };
}

/** A slow request holding `backend`'s one slot (its maxInFlight 1), once it holds it; `done` when its answer ends. */
async function holdSlot(group: string, backend: string, content: string): Promise<{ done: Promise<string> }> {
  const done = chat(group, content).then((r) => r.text(), () => "");
  await vi.waitFor(async () => expect((await gw.status(group)).backends.find((b) => b.id === backend)?.inFlight).toBe(1), EVENTUALLY);
  return { done };
}

const charges = async (group: string) => (await gw.status(group)).backends.map((b) => [b.id, b.failed, b.breaker.state]);
const breakerOf = async (group: string, id: string) => (await gw.status(group)).backends.find((b) => b.id === id)?.breaker.state;

describe("a 403 a firewall in front of every engine answers for what the prompt holds", () => {
  it("is the request's: two calls through the SDK open no breaker, and the client is told not to retry", async () => {
    const { sdk, answers, calls } = await twoBlockedCalls("behind-waf");
    expect.soft(answers).toEqual([[403, "false"], [403, "false"]]);
    expect.soft(calls).toBe(2);
    // The firewall's page is not passed on.
    const err = await sdk.chat.completions.create({ model: "behind-waf", messages: [{ role: "user", content: BLOCKED }], max_tokens: 4 }).catch((e: unknown) => e);
    expect.soft(err instanceof OpenAI.PermissionDeniedError && [err.code, /blocked|html/i.test(err.message)]).toEqual(["upstream_auth_error", false]);
    await vi.waitFor(async () => expect(await gw.inFlight("behind-waf")).toBe(0), EVENTUALLY);
    expect.soft(await charges("behind-waf")).toEqual(["a", "b", "c"].map((id) => [id, 0, "closed"]));
    const fine = await chat("behind-waf", "hello");
    expect(fine.status).toBe(200);
    await fine.text();
  }, 30_000);
});

describe("a 403 from one server among others that answer", () => {
  it("is its own (its Access token missing): charged until its breaker opens, every request served", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 15; i++) {
      const res = await chat("one-keyless", `hello ${i}`);
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses).toEqual(Array.from({ length: 15 }, () => 200));
    await vi.waitFor(async () => expect(await breakerOf("one-keyless", "keyless")).toBe("open"), EVENTUALLY);
  }, 30_000);
});

describe("a 403 from one server among others that answer, with failover off (maxAttempts 1)", () => {
  it("is its own all the same, though no second backend was asked: a 502 the SDKs retry, charged until its breaker opens", async () => {
    const seen: unknown[] = [];
    for (let i = 0; i < 15; i++) {
      const res = await chat("one-keyless-no-failover", `hello ${i}`);
      const body = (await res.json()) as { error?: { code: string } };
      if (res.status !== 200) seen.push([res.status, body.error?.code, res.headers.get("x-should-retry")]);
    }
    // One in three before its breaker opens (5 failures in a row): each the backend's, retryable.
    expect.soft(seen.length).toBeGreaterThan(0);
    expect.soft(seen).toEqual(seen.map(() => [502, "upstream_auth_error", null]));
    await vi.waitFor(async () => expect(await breakerOf("one-keyless-no-failover", "nf-keyless")).toBe("open"), EVENTUALLY);
    const res = await chat("one-keyless-no-failover", "after");
    expect(res.status).toBe(200);
    await res.text();
  }, 60_000);
});

describe("a 403 from one server while every other of its group rests (its breaker open)", () => {
  it("is the request's, as a group of one's: two calls through the SDK, the 403 not to retry, and the group's last breaker stays closed", async () => {
    // The down server fails the requests the other serves until its breaker opens.
    for (let i = 0; i < 30 && (await breakerOf("waf-beside-resting", "r-down")) !== "open"; i++) {
      const res = await chat("waf-beside-resting", `hello ${i}`);
      expect.soft(res.status).toBe(200);
      await res.text();
    }
    expect(await breakerOf("waf-beside-resting", "r-down")).toBe("open");
    const { answers, calls } = await twoBlockedCalls("waf-beside-resting");
    expect.soft(answers).toEqual([[403, "false"], [403, "false"]]);
    expect.soft(calls).toBe(2);
    await vi.waitFor(async () => expect(await gw.inFlight("waf-beside-resting")).toBe(0), EVENTUALLY);
    expect.soft((await charges("waf-beside-resting")).find(([id]) => id === "r-waf")).toEqual(["r-waf", 0, "closed"]);
    const fine = await chat("waf-beside-resting", "hello");
    expect(fine.status).toBe(200);
    await fine.text();
  }, 60_000);
});

describe("a realtime handshake one server among others refuses with a 403, failover off", () => {
  it("is its backend's own: a 502 the SDKs retry, and charged", async () => {
    const seen: unknown[] = [];
    for (let i = 0; i < 9; i++) {
      const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=realtime-one-keyless-no-failover`, { headers: { authorization: `Bearer ${gw.key}` } });
      if (h.kind === "open") h.socket.ws.close();
      else seen.push([h.status, h.headers["x-should-retry"]]);
    }
    expect.soft(seen.length).toBeGreaterThan(0);
    expect.soft(seen).toEqual(seen.map(() => [502, undefined]));
    await vi.waitFor(async () => expect((await gw.status("realtime-one-keyless-no-failover")).backends.find((b) => b.id === "rk")?.failed).toBeGreaterThan(0), EVENTUALLY);
  }, 30_000);
});

describe("a realtime handshake every backend refuses with a 403", () => {
  it("is the session's alike: its 403, not to be retried, and no breaker charged", async () => {
    for (let i = 0; i < 4; i++) {
      const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=realtime-refused`, { headers: { authorization: `Bearer ${gw.key}` } });
      expect.soft(h.kind === "refused" ? [h.status, h.headers["x-should-retry"]] : "open").toEqual([403, "false"]);
    }
    await vi.waitFor(async () => expect(await gw.inFlight("realtime-refused")).toBe(0), EVENTUALLY);
    expect(await charges("realtime-refused")).toEqual(["p", "q", "r"].map((id) => [id, 0, "closed"]));
  }, 30_000);
});

describe("a 401 from every backend of a group: the engines refusing the gateway's key", () => {
  it("is each backend's own: a 502 the SDKs retry, every breaker opens, and the fallback group serves", async () => {
    const seen: unknown[] = [];
    let served: Response | null = null;
    for (let i = 0; i < 10 && served === null; i++) {
      const res = await chat("all-keyless", `hello ${i}`);
      if (res.status === 200) served = res;
      else {
        const body = (await res.json()) as { error: { code: string } };
        seen.push([res.status, body.error.code, res.headers.get("x-should-retry")]);
      }
    }
    // The engines' refusal is no firewall's: retryable, as any backend's failure is.
    expect.soft(seen[0]).toEqual([502, "upstream_auth_error", null]);
    expect(served?.headers.get("x-kvgate-backend")).toBe("served-1");
    await served?.text();
    await vi.waitFor(async () => expect((await charges("all-keyless")).map(([, , state]) => state)).toEqual(["open", "open", "open"]), EVENTUALLY);
  }, 60_000);
});

describe("a 403 from every backend of a group: a proxy in front of them refusing every request", () => {
  it("takes the one step on to the fallback group past the attempts' bound, no breaker charged, and shows in the credentials series", async () => {
    const res = await chat("all-forbidden", "hello");
    expect([res.status, res.headers.get("x-kvgate-backend")]).toEqual([200, "served-1"]);
    await res.text();
    await vi.waitFor(async () => expect(await gw.inFlight("all-forbidden")).toBe(0), EVENTUALLY);
    expect.soft(await charges("all-forbidden")).toEqual(["f1", "f2", "f3"].map((id) => [id, 0, "closed"]));
    // What an operator alerts on for a wrong Access token: no breaker opens, but each refusal is counted by its cause.
    await vi.waitFor(async () => {
      const text = await metricsText(gw.url, adminKey);
      for (const id of ["f1", "f2", "f3"]) expect(sample(text, "kvgate_attempt_failures_total", `group="all-forbidden",backend="${id}",cause="credentials"`)).toBe(1);
    }, EVENTUALLY);
  }, 30_000);

  it("a realtime handshake alike: the fallback group's backend accepts it", async () => {
    const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=realtime-forbidden`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(h.kind === "refused" ? [h.status, h.headers["x-should-retry"]] : "open").toBe("open");
    if (h.kind === "open") h.socket.ws.close();
    await vi.waitFor(async () => expect(await gw.inFlight("realtime-forbidden")).toBe(0), EVENTUALLY);
    expect.soft(await charges("realtime-forbidden")).toEqual(["rf1", "rf2", "rf3"].map((id) => [id, 0, "closed"]));
  }, 30_000);
});

describe("a 403 from one server while the other of its group is at its in-flight limit", () => {
  it("is no word of the group: the client gets the route's 503 to try again later, not the 403", async () => {
    // The busy server's one slot, held by a slow answer.
    const holding = await holdSlot("forbidden-beside-busy", "busy", "hold the slot");
    const res = await chat("forbidden-beside-busy", "hello");
    const body = (await res.json()) as { error: { code: string | null } };
    expect([res.status, res.headers.get("x-should-retry")]).toEqual([503, null]);
    expect(body.error.code).not.toBe("upstream_auth_error");
    await holding.done;
  }, 30_000);
});

describe("a 403 two servers gave alike while a third is at its in-flight limit", () => {
  it("stands (the firewall refuses the prompt, the busy one's would too): the 403 not to retry, not the route's 503", async () => {
    // The busy server's one slot, held by a slow answer (the WAF refusing it elsewhere sends it there).
    const holding = await holdSlot("waf-beside-busy", "w-busy", BLOCKED);
    const res = await chat("waf-beside-busy", BLOCKED);
    await res.text();
    expect([res.status, res.headers.get("x-should-retry")]).toEqual([403, "false"]);
    await holding.done;
  }, 30_000);
});

describe("a 403 every backend of a group gave alike, its fallback group's one server at its in-flight limit", () => {
  it("is no word of the fallback group (other servers, behind their own proxy): the route's 503 to try again later, not the 403", async () => {
    const holding = await holdSlot("one-slot", "slot", "hold the slot");
    const res = await chat("forbidden-then-full", "hello");
    await res.text();
    expect([res.status, res.headers.get("x-should-retry")]).toEqual([503, null]);
    await holding.done;
  }, 30_000);

  it("alike when the group of the 403s had a busy backend too: the fallback group's 503, not the 403", async () => {
    const busy = await holdSlot("forbidden-busy-then-full", "fbf-busy", "hold the slot");
    const full = await holdSlot("one-slot", "slot", "hold the slot");
    const res = await chat("forbidden-busy-then-full", "hello");
    await res.text();
    expect([res.status, res.headers.get("x-should-retry")]).toEqual([503, null]);
    await Promise.all([busy.done, full.done]);
  }, 30_000);

  it("a realtime handshake alike: the route's 503, not the 403", async () => {
    const session = opened(await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=realtime-one-slot`, { headers: { authorization: `Bearer ${gw.key}` } }));
    try {
      await vi.waitFor(async () => expect(await gw.inFlight("realtime-one-slot")).toBe(1), EVENTUALLY);
      const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=realtime-forbidden-then-full`, { headers: { authorization: `Bearer ${gw.key}` } });
      if (h.kind === "open") h.socket.ws.close();
      expect(h.kind === "refused" ? [h.status, h.headers["x-should-retry"]] : "open").toEqual([503, undefined]);
    } finally {
      session.ws.close();
    }
  }, 30_000);
});

describe("a 403 one server gave beside a busy one, then 403s every backend of the fallback group gave alike", () => {
  it("the fallback group's word takes the one step past the attempts' bound on to the next fallback, which serves", async () => {
    const holding = await holdSlot("keyless-beside-busy-then", "lb-busy", "hold the slot");
    const res = await chat("keyless-beside-busy-then", "hello");
    await res.text();
    expect([res.status, res.headers.get("x-kvgate-backend")]).toEqual([200, "served-1"]);
    await holding.done;
  }, 30_000);
});
