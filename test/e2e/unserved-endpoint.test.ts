import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { connect } from "../support/websocket-client.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * An endpoint the group's engines do not serve (a chat model's vLLM has no /v1/embeddings, no
 * /v1/rerank, no realtime endpoint) is any client's to call: its 404 follows the request, as a
 * body every server crashes on does, and must not open the breakers every other tenant's requests
 * go through. A backend misconfigured among healthy ones is still charged with its 404.
 */

let upstream: HostileUpstream;
let sockets: WebSocketUpstream;
let gw: TestGateway;

const hostile = (behaviour: string, id: string) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "chat-7b" });

beforeAll(async () => {
  upstream = await startHostileUpstream();
  sockets = await startWebSocketUpstream();
  gw = await startTestGateway({
    modelGroups: [
      // Three chat-model engines, the breaker as it ships.
      { name: "chat-only", strategy: "round-robin", deployments: ["a", "b", "c"].map((id) => hostile("chat-only", id)) },
      // One GPU server, as many a deployment has.
      { name: "chat-only-alone", deployments: [hostile("chat-only", "alone")] },
      // Three engines with no realtime endpoint: each answers the handshake 404 (and chat 200).
      { name: "no-realtime", strategy: "round-robin", deployments: ["a", "b", "c"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:404`, model: "chat-7b" })) },
      // Three vLLMs serving chat: uvicorn answers a WebSocket to a path no route serves with a 403 and no body.
      { name: "no-realtime-route", strategy: "round-robin", deployments: ["a", "b", "c"].map((id) => ({ id, baseUrl: `${sockets.url}/no-route`, model: "chat-7b" })) },
      // Three Ollamas serving chat: a path their router has no route for is a plain-text 404 page.
      { name: "router-page", strategy: "round-robin", deployments: ["a", "b", "c"].map((id) => hostile("router-page", id)) },
      // One llama.cpp started for chat alone: embeddings are its 501.
      { name: "llamacpp-alone", deployments: [hostile("llamacpp-chat", "llamacpp")] },
      // Two engines gone behind their proxy (its 404 page on every path), a group to fall back to.
      { name: "behind-proxy", strategy: "round-robin", fallbacks: ["fallback"], deployments: [hostile("proxy-404", "gone-a"), hostile("proxy-404", "gone-b")] },
      { name: "fallback", deployments: [hostile("ok", "served")] },
      // Two engines gone behind their proxy's 404 page and one serving, no fallback group.
      { name: "two-gone", strategy: "round-robin", breaker: { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 60_000 }, deployments: [hostile("proxy-404", "gone-1"), hostile("proxy-404", "gone-2"), hostile("ok", "up")] },
      // Three engines gone behind their proxy, as many as the attempts' bound, and a group to fall back to.
      { name: "all-gone", strategy: "round-robin", fallbacks: ["fallback"], deployments: ["x", "y", "z"].map((id) => hostile("proxy-404", id)) },
      // Two embeddings engines' bare 404 for chat, and a third sick behind its proxy (its 502 page).
      { name: "one-sick", strategy: "round-robin", breaker: { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 60_000 }, deployments: [hostile("proxy-404", "tei-1"), hostile("proxy-404", "tei-2"), hostile("status:502", "sick")] },
      // Three engines answering every path with a 404 and no body, no fallback group.
      { name: "bare-404", strategy: "round-robin", deployments: ["a", "b", "c"].map((id) => hostile("proxy-404", id)) },
      // Two engines gone behind their proxy, and a fallback group of one slow server taking one request at a time.
      { name: "gone-then-full", strategy: "round-robin", fallbacks: ["one-slot"], deployments: [hostile("proxy-404", "gone-p"), hostile("proxy-404", "gone-q")] },
      { name: "one-slot", deployments: [{ ...hostile("slow-headers:2000", "slot"), maxInFlight: 1 }] },
      // That slow server's group taking one request at a time, falling back to engines that lack the endpoint.
      { name: "full-then-gone", fallbacks: ["bare-404"], deployments: [{ ...hostile("slow-headers:2000", "only"), maxInFlight: 1 }] },
      // That slow server's group taking one request at a time, then two fallbacks: a group gone whole behind its proxy, and one serving.
      { name: "full-then-gone-then-served", fallbacks: ["bare-404", "fallback"], deployments: [{ ...hostile("slow-headers:2000", "only-2"), maxInFlight: 1 }] },
      // One engine gone behind its proxy beside a slow server taking one request at a time, no fallback.
      { name: "gone-beside-full", strategy: "round-robin", deployments: [hostile("proxy-404", "gone-r"), { ...hostile("slow-headers:2000", "slot-2"), maxInFlight: 1 }] },
      // Two engines answering every path with a 404 and no body, and a server down (its breaker opens at its first failure), no fallback.
      { name: "one-down", strategy: "round-robin", breaker: { consecutiveFailures: 1, openMs: 60_000, probeIntervalMs: 60_000 }, deployments: [hostile("proxy-404", "lacks-1"), hostile("proxy-404", "lacks-2"), hostile("status:502", "down")] },
      // Two engines answering every path with a 404 and no body, and a fallback group of one server down (its breaker opens at its first failure).
      { name: "bare-then-down", strategy: "round-robin", fallbacks: ["down-fallback"], deployments: [hostile("proxy-404", "lacks-3"), hostile("proxy-404", "lacks-4")] },
      { name: "down-fallback", breaker: { consecutiveFailures: 1, openMs: 60_000, probeIntervalMs: 60_000 }, deployments: [hostile("status:502", "fallback-down")] },
      // Two engines with no realtime endpoint, and a fallback group of one realtime server taking one session at a time.
      { name: "no-realtime-then-full", strategy: "round-robin", fallbacks: ["rt-one-slot"], deployments: ["p", "q"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:404`, model: "chat-7b" })) },
      // Three engines with no realtime endpoint, as many as the attempts' bound, and a fallback group of one realtime server.
      { name: "no-realtime-then-served", strategy: "round-robin", fallbacks: ["rt-served"], deployments: ["r1", "r2", "r3"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:404`, model: "chat-7b" })) },
      { name: "rt-served", deployments: [{ id: "rt-echo", baseUrl: `${sockets.url}/echo`, model: "chat-7b" }] },
      { name: "rt-one-slot", deployments: [{ id: "rt-slot", baseUrl: `${sockets.url}/echo`, model: "chat-7b", maxInFlight: 1 }] },
      // A backend whose baseUrl leads nowhere (a 404 naming no model) beside a healthy one.
      { name: "one-misconfigured", strategy: "round-robin", breaker: { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 60_000 }, deployments: [hostile("nowhere", "misconfigured"), hostile("ok", "ok")] },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await sockets?.close();
  await upstream?.close();
});

const charges = async (group: string) => (await gw.status(group)).backends.map((b) => [b.id, b.failed, b.breaker.state]);

async function chat(model: string): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 4 }),
  });
}

/** `n` chat requests in turn: each one's status and the backend that answered it. */
async function chats(model: string, n: number): Promise<unknown[]> {
  const served: unknown[] = [];
  for (let i = 0; i < n; i++) {
    const res = await chat(model);
    served.push([res.status, res.headers.get("x-kvgate-backend")]);
    await res.text();
  }
  return served;
}

/**
 * Five embeddings calls through the official SDK, with its defaults (every 5xx retried twice), each
 * refused: its status and message, and the HTTP calls the SDK made for all five.
 */
async function embeddingsRefused(model: string): Promise<{ answers: unknown[]; calls: number }> {
  let calls = 0;
  const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, fetch: (url, init) => (calls++, fetch(url, init)) });
  const answers: unknown[] = [];
  for (let i = 0; i < 5; i++) {
    const err = await sdk.embeddings.create({ model, input: `hello ${i}` }).catch((e: unknown) => e);
    if (!(err instanceof OpenAI.APIError)) throw err;
    answers.push([err.status, err.message]);
  }
  return { answers, calls };
}

/** Each backend's charges, once nothing of the group is in flight: every lease settled. */
async function chargesOnceSettled(group: string): Promise<unknown[]> {
  await vi.waitFor(async () => expect(await gw.inFlight(group)).toBe(0), EVENTUALLY);
  return charges(group);
}

/** Backends none the worse: none charged, every breaker closed. */
const uncharged = (ids: readonly string[]) => ids.map((id) => [id, 0, "closed"]);

/** The group's backends are none the worse for it: none charged, every breaker closed, and chat is served. */
async function stillServes(group: string, ids: readonly string[]): Promise<void> {
  expect.soft(await chargesOnceSettled(group)).toEqual(uncharged(ids));
  const res = await chat(group);
  expect(res.status).toBe(200);
  await res.text();
}

describe("an endpoint no backend of the group serves", () => {
  it("is the request's: the SDK is told 404 once (no retry), no breaker counts it, and chat is still served", async () => {
    upstream.reset();
    const { answers, calls } = await embeddingsRefused("chat-only");
    // Every backend answered 404 (3 attempts, the group's maxAttempts): none of the group took the path, so it was the request's.
    expect.soft(answers).toEqual(Array.from({ length: 5 }, () => [404, expect.stringMatching(/model "chat-only".*do not serve \/v1\/embeddings/)]));
    expect.soft([calls, upstream.stats("chat-only").requests]).toEqual([5, 15]);
    await stillServes("chat-only", ["a", "b", "c"]);
  }, 30_000);

  it("a realtime handshake to engines with no realtime endpoint alike: the session's failure, not told to retry, no breaker counts it", async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 6; i++) {
      const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=no-realtime`, { headers: { authorization: `Bearer ${gw.key}` } });
      answers.push(h.kind === "refused" ? [h.status, h.headers["x-kvgate-attempts"], h.headers["x-should-retry"]] : "open");
    }
    expect.soft(answers).toEqual(Array.from({ length: 6 }, () => [502, "3", "false"]));
    await stillServes("no-realtime", ["a", "b", "c"]);
  }, 30_000);

  it("a realtime handshake to vLLMs serving chat alike: uvicorn's bodiless 403 for a path with no WebSocket route is no refused key", async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 6; i++) {
      const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=no-realtime-route`, { headers: { authorization: `Bearer ${gw.key}` } });
      answers.push(h.kind === "refused" ? [h.status, h.headers["x-kvgate-attempts"], h.headers["x-should-retry"]] : "open");
    }
    expect.soft(answers).toEqual(Array.from({ length: 6 }, () => [502, "3", "false"]));
    await stillServes("no-realtime-route", ["a", "b", "c"]);
  }, 30_000);
});

describe("an endpoint the group's only backend does not serve", () => {
  it("gets no verdict, with no other backend to contradict it: the request's, told 404 once, and the SDK's tries open no breaker", async () => {
    const { answers, calls } = await embeddingsRefused("chat-only-alone");
    expect.soft(answers).toEqual(Array.from({ length: 5 }, () => [404, expect.stringMatching(/model "chat-only-alone".*do not serve \/v1\/embeddings/)]));
    expect.soft(calls).toBe(5);
    await stillServes("chat-only-alone", ["alone"]);
  }, 30_000);
});

describe("an endpoint whose path an engine's router answers with a page, no error body (Ollama's)", () => {
  it("is the request's all the same: the SDK is told 404 once, no breaker counts it", async () => {
    const { answers, calls } = await embeddingsRefused("router-page");
    expect.soft(answers.map((a) => (a as unknown[])[0])).toEqual(Array.from({ length: 5 }, () => 404));
    expect.soft(calls).toBe(5);
    await stillServes("router-page", ["a", "b", "c"]);
  }, 30_000);
});

describe("an endpoint a llama.cpp started for chat alone does not serve (its 501 not_supported_error)", () => {
  it("is held as a 404 for the path is: the group's only backend gets no verdict, the SDK is told 404 once, and opens no breaker", async () => {
    const { answers, calls } = await embeddingsRefused("llamacpp-alone");
    expect.soft(answers.map((a) => (a as unknown[])[0])).toEqual(Array.from({ length: 5 }, () => 404));
    expect.soft(calls).toBe(5);
    await stillServes("llamacpp-alone", ["llamacpp"]);
  }, 30_000);
});

describe("a 404 with no error body on every backend (a proxy's page for a route it dropped, an embeddings engine asked for chat)", () => {
  it("is a path the group does not serve, whatever the path: its fallback group serves in its stead, and no breaker counts it", async () => {
    expect(await chats("behind-proxy", 4)).toEqual(Array.from({ length: 4 }, () => [200, "served"]));
    expect(await chargesOnceSettled("behind-proxy")).toEqual(uncharged(["gone-a", "gone-b"]));
  }, 30_000);

  it("with no fallback group, is told 404 endpoint_not_served once, and opens no breaker (an embeddings engine's group asked for chat: TEI's router answers so)", async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await chat("bare-404");
      answers.push([res.status, (await res.json() as { error: { code: string } }).error.code]);
    }
    expect(answers).toEqual(Array.from({ length: 5 }, () => [404, "endpoint_not_served"]));
    expect(await chargesOnceSettled("bare-404")).toEqual(uncharged(["a", "b", "c"]));
  }, 30_000);

  it("but a server resting beside engines that lack the endpoint leaves it not served: 404 endpoint_not_served, not 'every one is failing'", async () => {
    // Its 502 is the first request's failure beside two 404s, and opens its breaker.
    await (await chat("one-down")).text();
    await vi.waitFor(async () => expect((await gw.status("one-down")).backends.find((b) => b.id === "down")?.breaker.state).toBe("open"), EVENTUALLY);
    const answers: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await chat("one-down");
      answers.push([res.status, (await res.json() as { error: { code: string } }).error.code]);
    }
    expect(answers).toEqual(Array.from({ length: 3 }, () => [404, "endpoint_not_served"]));
  }, 30_000);

  it("and a fallback group none of which was tried for its open breakers (as may last hours) leaves it not served: 404 endpoint_not_served, not 'every one is failing'", async () => {
    // The fallback's own request fails on its one server, and opens its breaker.
    await (await chat("down-fallback")).text();
    await vi.waitFor(async () => expect((await gw.status("down-fallback")).backends[0]?.breaker.state).toBe("open"), EVENTUALLY);
    const answers: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await chat("bare-then-down");
      answers.push([res.status, (await res.json() as { error: { code: string } }).error.code]);
    }
    expect(answers).toEqual(Array.from({ length: 3 }, () => [404, "endpoint_not_served"]));
    expect(await chargesOnceSettled("bare-then-down")).toEqual(uncharged(["lacks-3", "lacks-4"]));
  }, 30_000);

  it("a realtime handshake alike: the full fallback's refusal, not told it is no use to retry", async () => {
    const ws = (model: string) => connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=${model}`, { headers: { authorization: `Bearer ${gw.key}` } });
    const session = await ws("rt-one-slot");
    if (session.kind !== "open") throw new Error(`the fallback's session was refused: ${session.status}`);
    const h = await ws("no-realtime-then-full");
    expect.soft(h.kind === "refused" ? [h.status, h.headers["x-should-retry"]] : "open").toEqual([503, undefined]);
    session.socket.ws.close();
    await session.socket.closed;
    await vi.waitFor(async () => expect(await gw.inFlight("rt-one-slot")).toBe(0), EVENTUALLY);
    // Its slot free again, the fallback takes the session.
    const again = await ws("no-realtime-then-full");
    expect(again.kind).toBe("open");
    if (again.kind === "open") again.socket.ws.close();
    expect.soft(await chargesOnceSettled("no-realtime-then-full")).toEqual(uncharged(["p", "q"]));
  }, 30_000);
});

describe("every backend of a group gone behind its proxy, as many as the attempts' bound", () => {
  it("a realtime handshake alike: one step past the bound, the fallback group's server opens the session, none of the group charged", async () => {
    const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=no-realtime-then-served`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(h.kind === "refused" ? [h.status, h.headers["x-should-retry"]] : "open").toBe("open");
    if (h.kind === "open") h.socket.ws.close();
    expect.soft(await chargesOnceSettled("no-realtime-then-served")).toEqual(uncharged(["r1", "r2", "r3"]));
  }, 30_000);

  it("is served by the group's fallback all the same: one step past the bound, for an endpoint none of the group served", async () => {
    expect(await chats("all-gone", 3)).toEqual(Array.from({ length: 3 }, () => [200, "served"]));
    expect(await chargesOnceSettled("all-gone")).toEqual(uncharged(["x", "y", "z"]));
    // Each move an operator sees in the logs, the step to the fallback too: three a request.
    const moves = gw.logs.flatMap((l) => {
      const at = l.indexOf('{"type":"event"');
      const e = at < 0 ? null : (JSON.parse(l.slice(at)) as Record<string, unknown>);
      return e?.event === "failover" && e.group === "all-gone" ? [e.next_attempt] : [];
    });
    expect(moves).toEqual([2, 3, 4, 2, 3, 4, 2, 3, 4]);
  }, 30_000);
});

describe("a group the request could not try (every backend at its in-flight limit) beside groups that lack the endpoint", () => {
  it("may serve what the others do not: its refusal is the answer, one to try again later, not 404 endpoint_not_served", async () => {
    // The fallback's one slot is taken; every backend of the model's own group answers 404.
    let held = chat("one-slot");
    await vi.waitFor(async () => expect(await gw.inFlight("one-slot")).toBe(1), EVENTUALLY);
    let res = await chat("gone-then-full");
    expect.soft([res.status, (await res.json() as { error: { message: string } }).error.message]).toEqual([503, expect.stringMatching(/at its in-flight limit/)]);
    expect((await held).status).toBe(200);
    // Its slot free again, the fallback serves it: the 404s were not the model's word on the path.
    res = await chat("gone-then-full");
    expect.soft([res.status, res.headers.get("x-kvgate-backend")]).toEqual([200, "slot"]);
    await res.text();
    expect.soft(await chargesOnceSettled("gone-then-full")).toEqual(uncharged(["gone-p", "gone-q"]));

    // The model's own group full, every backend of its fallback lacking the endpoint: the same.
    held = chat("full-then-gone");
    await vi.waitFor(async () => expect(await gw.inFlight("full-then-gone")).toBe(1), EVENTUALLY);
    res = await chat("full-then-gone");
    expect.soft([res.status, (await res.json() as { error: { message: string } }).error.message]).toEqual([503, expect.stringMatching(/at its in-flight limit/)]);
    expect((await held).status).toBe(200);
    expect(await chargesOnceSettled("bare-404")).toEqual(uncharged(["a", "b", "c"]));
  }, 30_000);

  it("leaves the step past the attempts' bound to a later fallback: the model's group full, a fallback gone whole behind its proxy, the next one serves", async () => {
    const held = chat("full-then-gone-then-served");
    await vi.waitFor(async () => expect(await gw.inFlight("full-then-gone-then-served")).toBe(1), EVENTUALLY);
    const res = await chat("full-then-gone-then-served");
    expect.soft([res.status, res.headers.get("x-kvgate-backend")]).toEqual([200, "served"]);
    await res.text();
    expect((await held).status).toBe(200);
  }, 30_000);

  it("a group with a backend it could not try, beside one that lacks the endpoint: the group's refusal, not 404", async () => {
    const held = chat("gone-beside-full");
    // Its 404 on the other backend (if it went there first) is held too, until the request ends: the slow server's own slot is what is full.
    await vi.waitFor(async () => expect((await gw.status("gone-beside-full")).backends.find((b) => b.id === "slot-2")?.inFlight).toBe(1), EVENTUALLY);
    // Round-robin: the held request went to one backend, so the next goes first to the other; both orders end the same.
    for (let i = 0; i < 2; i++) {
      const res = await chat("gone-beside-full");
      expect.soft([res.status, (await res.json() as { error: { message: string } }).error.message]).toEqual([503, expect.stringMatching(/at its in-flight limit/)]);
    }
    expect((await held).status).toBe(200);
  }, 30_000);
});

describe("a backend sick behind its proxy beside engines that lack the endpoint", () => {
  it("says nothing of the path: any client's calls for what the others lack charge none of them", async () => {
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1` });
    for (let i = 0; i < 3; i++) await sdk.chat.completions.create({ model: "one-sick", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }).catch(() => {});
    const [tei1, tei2] = await chargesOnceSettled("one-sick");
    expect([tei1, tei2]).toEqual(uncharged(["tei-1", "tei-2"]));
  }, 30_000);
});

describe("two backends of three gone behind their proxy's 404 page", () => {
  it("are charged as the third serves each request: the 404s were their backends' own, their breakers open, and no client is told 404", async () => {
    expect(await chats("two-gone", 6)).toEqual(Array.from({ length: 6 }, () => [200, "up"]));
    await vi.waitFor(async () => expect(await charges("two-gone")).toEqual([
      ["gone-1", 2, "open"],
      ["gone-2", 2, "open"],
      ["up", 0, "closed"],
    ]), EVENTUALLY);
  }, 30_000);
});

describe("a backend that answers 404 where another backend serves", () => {
  it("is charged with it: the request is served by the other, and the misconfigured backend's breaker opens", async () => {
    for (let i = 0; i < 4; i++) {
      const res = await chat("one-misconfigured");
      expect([res.status, res.headers.get("x-kvgate-backend")]).toEqual([200, "ok"]);
      await res.text();
    }
    await vi.waitFor(async () => expect(await charges("one-misconfigured")).toEqual([
      ["misconfigured", 2, "open"],
      ["ok", 0, "closed"],
    ]), EVENTUALLY);
  });
});
