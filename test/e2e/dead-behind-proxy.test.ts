import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { closedPort } from "../support/closed-port.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { connect, type OpenSocket } from "../support/websocket-client.ts";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Engines behind Cloudflare Tunnel, nginx or a Kubernetes ingress (README, Private networks): a dead
 * engine shows as its proxy's instant 502, never as a refused connection. Least-loaded sends a
 * request to an idle backend first, and a dead one is always idle: a request meets the two dead
 * backends one after the other, and two server-side failures in a row read as the request's
 * (workers/gateway/held-failure.ts). Unless the routing object charges a failure its backend had
 * while serving nothing as the others served (src/routing/silence.ts), the dead backends' breakers
 * never open and a share of the requests fails for ever, not to be retried, beside healthy backends.
 */

let upstream: HostileUpstream;
let sockets: WebSocketUpstream;
let gw: TestGateway;

// The default consecutiveFailures; no probe or cool-down during the test: the hostile upstream's health endpoint says ok.
const breaker = { openMs: 600_000, probeIntervalMs: 600_000 };
const CLIENTS = 8;
const REQUESTS = 40;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  sockets = await startWebSocketUpstream();
  gw = await startTestGateway({
    modelGroups: [
      {
        name: "half-dead",
        strategy: "least-loaded",
        breaker,
        deployments: [
          { id: "dead-1", baseUrl: `${upstream.url}/status:502`, model: "hostile-7b" },
          { id: "dead-2", baseUrl: `${upstream.url}/status:502`, model: "hostile-7b" },
          // Healthy engines take a generation's time to answer.
          { id: "live-1", baseUrl: `${upstream.url}/slow-headers:150`, model: "hostile-7b" },
          { id: "live-2", baseUrl: `${upstream.url}/slow-headers:150`, model: "hostile-7b" },
        ],
      },
      {
        // A body every engine behind a proxy fails on, and a server down (a refused connection), in every order round-robin gives.
        name: "poison",
        strategy: "round-robin",
        breaker: { ...breaker, consecutiveFailures: 100 },
        deployments: [
          { id: "proxied-1", baseUrl: `${upstream.url}/status:502`, model: "hostile-7b" },
          { id: "proxied-2", baseUrl: `${upstream.url}/status:502`, model: "hostile-7b" },
          { id: "down", baseUrl: `http://127.0.0.1:${await closedPort()}`, model: "hostile-7b" },
        ],
      },
      {
        // Two engines dead behind their proxies beside a healthy one asking for a second's wait (a 429).
        name: "pair-then-busy",
        strategy: "round-robin",
        breaker: { ...breaker, consecutiveFailures: 100 },
        deployments: [
          { id: "gone-1", baseUrl: `${upstream.url}/status:502`, model: "hostile-7b" },
          { id: "gone-2", baseUrl: `${upstream.url}/status:502`, model: "hostile-7b" },
          { id: "busy", baseUrl: `${upstream.url}/rate-limited:1`, model: "hostile-7b" },
        ],
      },
      {
        // Realtime engines alike: a session holds its backend's lease while open, so the dead ones,
        // refusing the handshake with their proxies' 502, stay the idle ones least-loaded tries first.
        name: "rt-half-dead",
        strategy: "least-loaded",
        breaker,
        deployments: [
          { id: "rt-dead-1", baseUrl: `${sockets.url}/refuse:502`, model: "chat-7b" },
          { id: "rt-dead-2", baseUrl: `${sockets.url}/refuse:502`, model: "chat-7b" },
          { id: "rt-live-1", baseUrl: `${sockets.url}/echo`, model: "chat-7b" },
          { id: "rt-live-2", baseUrl: `${sockets.url}/echo`, model: "chat-7b" },
        ],
      },
      // Every realtime engine of the group dead behind its proxy, and no fallback group.
      { name: "rt-dead-whole", strategy: "least-loaded", breaker, deployments: ["rt-gone-1", "rt-gone-2", "rt-gone-3"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:502`, model: "chat-7b" })) },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  await sockets?.close();
});

async function chat(i: number, model = "half-dead"): Promise<string> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: `message ${i}` }], max_tokens: 4 }),
  });
  await res.text();
  return `${res.status} attempts=${res.headers.get("x-kvgate-attempts")} retry=${res.headers.get("x-should-retry")}`;
}

/** `n` requests from `clients` clients, each sending its next as soon as its last is answered. */
async function load(n: number, clients: number): Promise<string[]> {
  const answers: string[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < n) answers.push(await chat(next++));
  }));
  return answers;
}

const breakers = async (group = "half-dead") => Object.fromEntries((await gw.status(group)).backends.map((b) => [b.id, b.breaker.state]));

describe("two dead engines behind a proxy, beside two healthy ones", () => {
  it("are taken out: every request is answered by a healthy backend, their breakers open, and every request after goes to one at once", async () => {
    const first = await load(REQUESTS, CLIENTS);
    await vi.waitFor(async () => expect(await gw.inFlight("half-dead")).toBe(0), EVENTUALLY);
    // Two 502s alike go on to a third backend (the default maxAttempts): its answer says they were their backends'.
    expect({ breakers: await breakers(), failed: first.filter((a) => !a.startsWith("200 ")) }).toEqual({ breakers: { "dead-1": "open", "dead-2": "open", "live-1": "closed", "live-2": "closed" }, failed: [] });
    const after = await load(REQUESTS, CLIENTS);
    expect(after.filter((a) => !a.startsWith("200 attempts=1 "))).toEqual([]);
  });
});

describe("two engines behind a proxy failing a request alike, beside a server down", () => {
  it("leave it the request's, not to be retried, whatever the attempt after them met", async () => {
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) answers.push(await chat(i, "poison"));
    expect(answers).toEqual(Array.from({ length: 6 }, () => expect.stringMatching(/^502 attempts=\d retry=false$/)));
  });

  it("leave an answer with its own word on waiting as it came: a 429's Retry-After the SDKs wait out and retry (found by review)", async () => {
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) answers.push(await chat(i, "pair-then-busy"));
    expect(answers.filter((a) => a.startsWith("429") && a.endsWith("retry=false"))).toEqual([]);
    expect(answers.some((a) => a.startsWith("429"))).toBe(true);
  });
});

describe("realtime engines dead behind their proxies", () => {
  it("two beside two healthy ones are taken out: every handshake opens a session on a healthy backend, and their breakers open", async () => {
    const url = `${gw.url.replace(/^http/, "ws")}/v1/realtime?model=rt-half-dead`;
    const open: OpenSocket[] = [];
    const refused: string[] = [];
    try {
      // Sessions kept open: their leases keep the healthy backends busy, the dead ones idle.
      for (let i = 0; i < 20; i++) {
        const h = await connect(url, { headers: { authorization: `Bearer ${gw.key}` } });
        if (h.kind === "open") open.push(h.socket);
        else refused.push(`${h.status} attempts=${String(h.headers["x-kvgate-attempts"])} retry=${String(h.headers["x-should-retry"])}`);
      }
      // Two proxies' 502s alike go on to a third backend (the default maxAttempts): its accepting says they were their backends'.
      expect(refused).toEqual([]);
      await vi.waitFor(async () => expect(await breakers("rt-half-dead")).toEqual({ "rt-dead-1": "open", "rt-dead-2": "open", "rt-live-1": "closed", "rt-live-2": "closed" }), EVENTUALLY);
      const after = await connect(url, { headers: { authorization: `Bearer ${gw.key}` } });
      if (after.kind === "open") open.push(after.socket);
      expect(after.kind === "open" ? after.socket.headers["x-kvgate-attempts"] : after.status).toBe("1");
    } finally {
      for (const s of open) s.ws.close();
    }
  });

  it("a group dead whole, with no fallback: three proxies' 502s alike are the handshake's, not to be retried, as a request's are, and no breaker is charged", async () => {
    const url = `${gw.url.replace(/^http/, "ws")}/v1/realtime?model=rt-dead-whole`;
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) {
      const h = await connect(url, { headers: { authorization: `Bearer ${gw.key}` } });
      if (h.kind === "open") h.socket.ws.close();
      answers.push(h.kind === "open" ? "open" : `${h.status} attempts=${String(h.headers["x-kvgate-attempts"])} retry=${String(h.headers["x-should-retry"])}`);
    }
    expect(answers).toEqual(Array.from({ length: 6 }, () => "502 attempts=3 retry=false"));
    const charges = async () => (await gw.status("rt-dead-whole")).backends.map((b) => [b.id, b.failed, b.rejected, b.breaker.state]);
    await vi.waitFor(async () => expect(await charges()).toEqual([["rt-gone-1", 0, 6, "closed"], ["rt-gone-2", 0, 6, "closed"], ["rt-gone-3", 0, 6, "closed"]]), EVENTUALLY);
  });
});
