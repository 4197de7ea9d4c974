import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { connect } from "../support/websocket-client.ts";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A group whose every engine is dead behind its proxy (Cloudflare Tunnel, nginx, an ingress: each
 * answers the proxy's instant 502), with a fallback group that serves. A request meets two of the
 * dead backends failing alike, which alone reads as a body every server crashes on
 * (workers/gateway/held-failure.ts); no backend of the group ever serves, so the silence rule
 * (src/routing/silence.ts) charges none of them either. Unless the fallback group is asked, every
 * request fails for good and no breaker opens, while the fallback could serve.
 */

let upstream: HostileUpstream;
let sockets: WebSocketUpstream;
let gw: TestGateway;

const hostile = (behaviour: string, id: string) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b" });
// The default consecutiveFailures; no probe or cool-down during the test: the hostile upstream's health endpoint says ok.
const breaker = { openMs: 600_000, probeIntervalMs: 600_000 };
const REQUESTS = 20;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  sockets = await startWebSocketUpstream();
  gw = await startTestGateway({
    modelGroups: [
      { name: "dead", strategy: "least-loaded", breaker, fallbacks: ["spare"], deployments: ["dead-1", "dead-2", "dead-3"].map((id) => hostile("status:502", id)) },
      { name: "spare", strategy: "least-loaded", breaker, deployments: [hostile("slow-headers:50", "spare-1"), hostile("slow-headers:50", "spare-2")] },
      // Two attempts at most: the fallback is one step past the bound, as after 404s for the endpoint.
      { name: "dead-two-tries", strategy: "least-loaded", breaker, failover: { maxAttempts: 2 }, fallbacks: ["spare"], deployments: ["dead-4", "dead-5"].map((id) => hostile("status:502", id)) },
      // Realtime engines dead behind their proxies, and a fallback group that accepts the handshake.
      { name: "rt-dead", strategy: "least-loaded", breaker, fallbacks: ["rt-spare"], deployments: ["rt-dead-1", "rt-dead-2", "rt-dead-3"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:502`, model: "chat-7b" })) },
      { name: "rt-spare", breaker, deployments: [{ id: "echo", baseUrl: `${sockets.url}/echo`, model: "chat-7b" }] },
      // A body every engine crashes on, in a group and in its fallback alike: the request's.
      { name: "crashy", strategy: "round-robin", breaker: { ...breaker, consecutiveFailures: 2 }, fallbacks: ["crashy-spare"], deployments: ["a", "b", "c"].map((id) => hostile("crash-on", id)) },
      { name: "crashy-spare", strategy: "round-robin", breaker: { ...breaker, consecutiveFailures: 2 }, deployments: ["d", "e"].map((id) => hostile("crash-on", id)) },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  await sockets?.close();
});

async function chat(model: string, content: string): Promise<string> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content }], max_tokens: 4 }),
  });
  await res.text();
  return `${res.status} attempts=${res.headers.get("x-kvgate-attempts")} retry=${res.headers.get("x-should-retry")} group=${res.headers.get("x-kvgate-group")}`;
}

const breakers = async (group: string) => Object.fromEntries((await gw.status(group)).backends.map((b) => [b.id, b.breaker.state]));

describe("a group dead behind its proxies, with a fallback group", () => {
  it("is served by its fallback, and its breakers open: the 502s were their backends'", async () => {
    const first: string[] = [];
    for (let i = 0; i < REQUESTS; i++) first.push(await chat("dead", `message ${i}`));
    // Two dead backends, a third asked after two proxies' 502s alike (the default maxAttempts, 3), then the
    // fallback, one step past the bound; fewer, or none, once breakers open.
    expect(first.filter((a) => !/^200 attempts=[1234] retry=null group=spare$/.test(a))).toEqual([]);
    expect(first[0]).toBe("200 attempts=4 retry=null group=spare");
    await vi.waitFor(async () => expect(await gw.inFlight("dead")).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await breakers("dead")).toEqual({ "dead-1": "open", "dead-2": "open", "dead-3": "open" }), EVENTUALLY);
    expect(await breakers("spare")).toEqual({ "spare-1": "closed", "spare-2": "closed" });
    // The official SDK, which retries a 5xx twice: served by the fallback at once.
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key });
    const { data, response } = await sdk.chat.completions.create({ model: "dead", messages: [{ role: "user", content: "after" }], max_tokens: 4 }).withResponse();
    expect([data.choices[0]?.message.content, response.headers.get("x-kvgate-attempts"), response.headers.get("x-kvgate-group")]).toEqual(["ok", "1", "spare"]);
  });

  it("is served by its fallback one step past maxAttempts", async () => {
    expect(await chat("dead-two-tries", "hello")).toBe("200 attempts=3 retry=null group=spare");
  });

  it("a realtime handshake alike: the fallback accepts it, and the dead group's breakers open", async () => {
    const url = `${gw.url.replace(/^http/, "ws")}/v1/realtime?model=rt-dead`;
    const answers: unknown[] = [];
    for (let i = 0; i < 10; i++) {
      const h = await connect(url, { headers: { authorization: `Bearer ${gw.key}` } });
      answers.push(h.kind === "refused" ? [h.status, h.headers["x-should-retry"]] : "open");
      if (h.kind === "open") h.socket.ws.close();
    }
    expect(answers.filter((a) => a !== "open")).toEqual([]);
    await vi.waitFor(async () => expect(await breakers("rt-dead")).toEqual({ "rt-dead-1": "open", "rt-dead-2": "open", "rt-dead-3": "open" }), EVENTUALLY);
  });

  it("a body every engine crashes on, in the fallback too, is the request's: not retried, no breaker opens", async () => {
    upstream.reset();
    for (let i = 0; i < 4; i++) expect(await chat("crashy", `CRASH ${i}`)).toBe("502 attempts=3 retry=false group=crashy-spare");
    // Two backends of the group, then one of the fallback, each time.
    expect(upstream.stats("crash-on").requests).toBe(12);
    await vi.waitFor(async () => expect((await gw.inFlight("crashy")) + (await gw.inFlight("crashy-spare"))).toBe(0), EVENTUALLY);
    expect({ ...(await breakers("crashy")), ...(await breakers("crashy-spare")) }).toEqual({ a: "closed", b: "closed", c: "closed", d: "closed", e: "closed" });
    expect(await chat("crashy", "fine")).toBe("200 attempts=1 retry=null group=null");
  });
});
