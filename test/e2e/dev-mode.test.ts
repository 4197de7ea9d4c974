import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { moveFleet, wranglerDevConfig } from "../../bench/harness/dev-config.ts";
import { DEFAULT_FLEET_PORT, MODEL, fleetUrls } from "../../bench/start/options.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

// The dev config exactly as wrangler.toml ships it, served as `wrangler deploy` bundles the
// gateway. Only its deployments move, from npm start's fleet ports to a fleet of this test's own,
// so the test neither collides with a developer's npm start nor misses an answer it should see.
let fleet: Fleet;
let gw: TestGateway;

beforeAll(async () => {
  fleet = await startFleet({ workers: 4, basePort: 0, preset: "instant", servedModelName: MODEL });
  gw = await startTestGateway(moveFleet(wranglerDevConfig(), fleetUrls(DEFAULT_FLEET_PORT), fleet.urls));
});
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
});

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One request on a real socket, with the Host header the caller says (fetch would not let it). */
function send(method: string, path: string, headers: Record<string, string>, body?: string): Promise<Reply> {
  const u = new URL(gw.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, method, path, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const CHAT = "/v1/chat/completions";
const ask = JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: "Hello!" }] });

describe("the dev config", () => {
  it("answers a request that carries the key (so every refusal below is about the key)", async () => {
    const res = await send("POST", CHAT, { "content-type": "application/json", authorization: `Bearer ${gw.key}` }, ask);
    expect(res.status).toBe(200);
    expect(res.body).toContain('"choices"');
  });

  const OWN_ADDRESS = "the gateway's own address";
  it.each(["localhost", "127.0.0.1", "[::1]", "localhost:8787", OWN_ADDRESS, "gateway.example"])("refuses a request without a key, Host: %s", async (named) => {
    const host = named === OWN_ADDRESS ? new URL(gw.url).host : named;
    for (const [method, path, body] of [["POST", CHAT, ask], ["GET", "/v1/models", undefined]] as const) {
      const res = await send(method, path, { host, "content-type": "application/json" }, body);
      expect({ path, status: res.status }).toEqual({ path, status: 401 });
      expect(JSON.parse(res.body)).toMatchObject({ error: { type: "authentication_error" } });
    }
  });

  it("gives a page on another origin no answer and no CORS grant, for a simple text/plain POST", async () => {
    // What fetch(url, { method: "POST", body: JSON.stringify(...) }) sends from any web page: a
    // "simple" request, sent without a preflight, so only the response can stop the page.
    const res = await send("POST", CHAT, { origin: "https://evil.example", "content-type": "text/plain;charset=UTF-8" }, ask);
    expect(res.status).toBe(401);
    expect(res.headers["access-control-allow-origin"]).toBeUndefined();
    expect(res.body).not.toContain('"choices"');
  });

  it("grants no CORS preflight to a page on another origin", async () => {
    const res = await send("OPTIONS", CHAT, { origin: "https://evil.example", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" });
    expect(res.headers["access-control-allow-origin"]).toBeUndefined();
    expect(res.headers["access-control-allow-headers"]).toBeUndefined();
  });
});
