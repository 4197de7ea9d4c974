import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import OpenAI from "openai";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { conversation, EVENTUALLY, status } from "./gateway.ts";

/**
 * One deployment of a group names a secret this deploy lacks (an Access token `wrangler secret
 * delete`d, or dropped by a later deploy), beside a healthy one (review s63 finding 1). Nothing can
 * be sent to it, so a request routed there goes on to the other backend, as after a refused
 * connection; the deployment is no worse a server for it (no verdict: another Worker version may
 * hold the secret), and, under prefix-aware routing, it keeps no conversation it did not serve.
 * Only a request with no backend left is answered 500 config_invalid (secret-lost-after-seed.test.ts).
 */

const SECRET = "ACCESS_CLIENT_SECRET";
const GROUP = "secret-lost-beside-healthy";
const fleet = inject("upstreams").fleetUrls;
// Another serialisation of the same config: nothing this file's isolate loaded with the secret stands in for it.
const withoutSecret = { ...env, [SECRET]: undefined, KVGATE_CONFIG: JSON.stringify(JSON.parse(env.KVGATE_CONFIG), null, 2) } as unknown as Env;

// The official SDK, into the Worker of the deploy that lacks the secret; no retries of its own.
const client = new OpenAI({
  apiKey: env.KVGATE_MASTER_KEY,
  baseURL: "https://kvgate.test/v1",
  maxRetries: 0,
  fetch: async (input, init) => {
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request(input as RequestInfo, init as RequestInit), withoutSecret, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  },
});

afterEach(() => {
  vi.restoreAllMocks();
});

describe("a deployment whose secret this deploy lacks, beside a healthy one, under prefix-aware routing", () => {
  it("fails every request it is routed over to the healthy one, is charged nothing, and keeps no conversation", async () => {
    // Added while the secret is set, as the fleet held it before the deploy that dropped it.
    const lacking = { id: "lacking", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL, headersFromEnv: { "CF-Access-Client-Secret": SECRET } };
    const healthy = { id: "healthy", baseUrl: fleet[1] as string, model: UPSTREAM_MODEL };
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: GROUP, strategy: "prefix-aware", deployments: [lacking, healthy] } }), 201);
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);

    // First turns of distinct conversations: least-loaded, ties at random, picks the lacking deployment for some.
    const metLacking: string[] = [];
    const answers: [string, number | string, string | null, string | null][] = [];
    for (let i = 0; i < 12; i++) {
      const topic = `lost-secret-${i}`;
      try {
        const { response } = await client.chat.completions.create({ model: GROUP, messages: conversation(topic), max_tokens: 2 }).withResponse();
        answers.push([topic, response.status, response.headers.get("x-kvgate-backend"), response.headers.get("x-kvgate-attempts")]);
        if (response.headers.get("x-kvgate-attempts") === "2") metLacking.push(topic);
      } catch (e) {
        answers.push([topic, e instanceof OpenAI.APIError ? `${e.status} ${String(e.code)}` : String(e), null, null]);
      }
    }
    expect(answers).toEqual(answers.map(([topic, , , attempts]) => [topic, 200, "healthy", attempts === "2" ? "2" : "1"]));
    expect(metLacking.length).toBeGreaterThan(0);

    // The next turn of a conversation whose first met the lacking deployment: the healthy one served it, and holds its prefix.
    const topic = metLacking[0] as string;
    const { response } = await client.chat.completions.create({ model: GROUP, messages: conversation(topic, 2), max_tokens: 2 }).withResponse();
    expect([response.status, response.headers.get("x-kvgate-backend"), response.headers.get("x-kvgate-reason"), response.headers.get("x-kvgate-attempts")]).toEqual([200, "healthy", "prefix-hit", "1"]);

    // No verdict on the lacking deployment (no request reached it), and nothing left in flight.
    await vi.waitFor(async () => {
      const backends = (await status(GROUP)).backends.map((b) => [b.id, b.inFlight, b.failed, b.breaker.state]);
      expect(backends).toEqual([
        ["lacking", 0, 0, "closed"],
        ["healthy", 0, 0, "closed"],
      ]);
    }, EVENTUALLY);
    // The operator reads what is wrong, each time, never the secret's value.
    const logged = errors.mock.calls.flat().map(String).join("\n");
    expect(logged).toContain(`backend lacking of group ${GROUP} cannot be reached as configured: headersFromEnv.CF-Access-Client-Secret names ${SECRET}, which is not set`);
    expect(logged).not.toContain(env.ACCESS_CLIENT_SECRET);
  });
});
