import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { connect } from "../support/websocket-client.ts";
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

beforeAll(async () => {
  upstream = await startHostileUpstream();
  sockets = await startWebSocketUpstream();
  gw = await startTestGateway({
    modelGroups: [
      // Three engines behind a WAF that refuses SQL in a body; the failover defaults.
      { name: "behind-waf", strategy: "round-robin", breaker, deployments: ["a", "b", "c"].map((id) => hostile("waf", id)) },
      // A server whose gateway key is wrong (its 403 on every request) beside two serving.
      { name: "one-keyless", strategy: "round-robin", breaker, deployments: [hostile("status:403", "keyless"), hostile("ok", "ok-1"), hostile("ok", "ok-2")] },
      // Three realtime servers behind a proxy that refuses every handshake (as one refuses a query it judges) with a 403 that says why.
      { name: "realtime-refused", strategy: "round-robin", breaker, deployments: ["p", "q", "r"].map((id) => ({ id, baseUrl: `${sockets.url}/refuse:403`, model: "chat-7b" })) },
    ],
  });
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

const charges = async (group: string) => (await gw.status(group)).backends.map((b) => [b.id, b.failed, b.breaker.state]);

describe("a 403 a firewall in front of every engine answers for what the prompt holds", () => {
  it("is the request's: two calls through the SDK open no breaker, and the client is told not to retry", async () => {
    let calls = 0;
    // The SDK's defaults: a 5xx retried twice.
    const sdk = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, fetch: (url, init) => (calls++, fetch(url, init)) });
    const answers: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      const err = await sdk.chat.completions.create({ model: "behind-waf", messages: [{ role: "user", content: BLOCKED }], max_tokens: 4 }).catch((e: unknown) => e);
      answers.push(err instanceof OpenAI.APIError ? [err.status, err.headers?.get("x-should-retry")] : err);
    }
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
  it("is its own (its gateway key refused): charged until its breaker opens, every request served", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 15; i++) {
      const res = await chat("one-keyless", `hello ${i}`);
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses).toEqual(Array.from({ length: 15 }, () => 200));
    await vi.waitFor(async () => expect((await gw.status("one-keyless")).backends.find((b) => b.id === "keyless")?.breaker.state).toBe("open"), EVENTUALLY);
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
