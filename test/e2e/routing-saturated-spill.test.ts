import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A request whose prefix sits on a full backend, through the bundled gateway in workerd on a real
 * socket in front of two simulated workers, with the official SDK as the client. The valve is at
 * its default (256) and each server's hard cap (maxInFlight) is 2: as with both defaults, a backend
 * at its cap is at the valve too, and the request that goes elsewhere for that must say so.
 */

const MODEL = "sim-spill";
const metricsKey = `sk-metrics-${randomBytes(16).toString("hex")}`;
let fleet: Fleet;
let gw: TestGateway;
let client: OpenAI;

beforeAll(async () => {
  fleet = await startFleet({ workers: 2, basePort: 0, preset: "instant", servedModelName: MODEL });
  gw = await startTestGateway(
    { modelGroups: [{ name: MODEL, strategy: "prefix-aware", deployments: fleet.urls.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: MODEL, maxInFlight: 2 })) }] },
    { KVGATE_METRICS_KEY: metricsKey },
  );
  client = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
});

const messages = [{ role: "user" as const, content: "Summarise the history of the glaciers of the Alps, valley by valley. ".repeat(8) }];

/** A stream the simulator keeps open (a token every 10 s) until the client leaves: its backend's slot stays taken. */
async function held(abort: AbortController): Promise<Response> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 50, messages, kvgate_sim: { chunk_delay_ms: 10_000 } }),
    signal: abort.signal,
  });
  expect(res.status).toBe(200);
  return res;
}

describe("a prompt whose backend is full", () => {
  it("goes to the other backend labelled saturated-spill, in the header and in /metrics", async () => {
    const abort = new AbortController();
    try {
      const first = await held(abort);
      const second = await held(abort);
      const full = first.headers.get("x-kvgate-backend");
      expect(second.headers.get("x-kvgate-backend")).toBe(full);
      expect(second.headers.get("x-kvgate-reason")).toBe("prefix-hit");
      expect(await gw.inFlight(MODEL)).toBe(2);

      const { response } = await client.chat.completions.create({ model: MODEL, max_tokens: 2, messages }).withResponse();
      expect(response.headers.get("x-kvgate-backend")).not.toBe(full);
      expect(response.headers.get("x-kvgate-reason")).toBe("saturated-spill");
      // What the backend that took it holds: none of the prompt.
      expect(response.headers.get("x-kvgate-prefix-blocks")).toMatch(/^0\/[1-9]\d*$/);

      const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${metricsKey}` } })).text();
      const spilled = metrics.split("\n").find((l) => l.startsWith("kvgate_routing_decisions_total{") && l.includes('reason="saturated-spill"'));
      expect(spilled).toMatch(/ 1$/);
    } finally {
      abort.abort();
    }
    await expect.poll(() => gw.inFlight(MODEL), EVENTUALLY).toBe(0);
  });
});
