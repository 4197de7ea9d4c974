import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import OpenAI from "openai";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import type { LeaseRelease, LeaseRenewal, RouteCall } from "../../src/routing/protocol.ts";
import { objectNamesOf, partition } from "../../src/sharding/partition.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { WAF_HOST } from "../support/vpc-stand-in.ts";
import { admin, ok } from "./admin.ts";
import { conversation, EVENTUALLY, gateway, status } from "./gateway.ts";

/**
 * One deployment of a group names a secret this deploy lacks (an Access token `wrangler secret
 * delete`d, or dropped by a later deploy), beside a healthy one. Nothing can be sent to it, so
 * routing passes it over from the start: no attempt is spent on it, it is no worse a server for it
 * (no verdict: another Worker version may hold the secret), it says nothing of what the other
 * backends answer (a firewall's refusal on the only one left is the request's), and, under
 * prefix-aware routing, it keeps no conversation. Only a request with no backend left is answered
 * 500 config_invalid (secret-lost-after-seed.test.ts).
 */

const SECRET = "ACCESS_CLIENT_SECRET";
const GROUP = "secret-lost-beside-healthy";
const fleet = inject("upstreams").fleetUrls;
// Another serialisation of the same config: nothing this file's isolate loaded with the secret stands in for it.
const withoutSecret = { ...env, [SECRET]: undefined, KVGATE_CONFIG: JSON.stringify(JSON.parse(env.KVGATE_CONFIG), null, 2) } as unknown as Env;

/**
 * The Worker of the deploy that lacks the secret, called as a client would over HTTP; what it
 * goes on doing after its answer awaited, but for a realtime session's (its lease is held until it closes).
 */
async function lackingDeploy(req: Request, session = false): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(req, withoutSecret, ctx);
  if (!session) await waitOnExecutionContext(ctx);
  return res;
}

/** The official SDK, into the Worker of the deploy that lacks the secret; no retries of its own unless said. */
const sdk = (maxRetries = 0) => new OpenAI({ apiKey: env.KVGATE_MASTER_KEY, baseURL: "https://kvgate.test/v1", maxRetries, fetch: (input, init) => lackingDeploy(new Request(input as RequestInfo, init as RequestInit)) });
const client = sdk();
/** The deployment that names the secret this deploy lacks, added while it is set. */
const lackingAt = (baseUrl: string) => ({ id: "lacking", baseUrl, model: UPSTREAM_MODEL, headersFromEnv: { "CF-Access-Client-Secret": SECRET } });
/** A server behind a web application firewall that refuses prompts holding `DROP TABLE` with its 403 page (test/support/vpc-stand-in.ts). */
const behindWaf = { id: "waf", baseUrl: `http://${WAF_HOST}`, binding: "GPU_VPC", model: UPSTREAM_MODEL };
/** Two failures in a row open a breaker, and nothing closes it during the test. */
const BREAKER = { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 60_000 };

afterEach(() => {
  vi.restoreAllMocks();
});

/** Neither the lacking deployment nor `other` was charged with anything, and nothing is left in flight. */
async function noVerdict(group: string, other: string): Promise<void> {
  await vi.waitFor(async () => {
    const backends = (await status(group)).backends.map((b) => [b.id, b.inFlight, b.failed, b.breaker.state]);
    expect(backends).toEqual([
      ["lacking", 0, 0, "closed"],
      [other, 0, 0, "closed"],
    ]);
  }, EVENTUALLY);
}

describe("a deployment whose secret this deploy lacks, beside a healthy one, under prefix-aware routing", () => {
  it("is passed over: every request goes to the healthy one at its first attempt, it is charged nothing, and the operator sees why", async () => {
    // Added while the secret is set, as the fleet held it before the deploy that dropped it.
    const lacking = { id: "lacking", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL, headersFromEnv: { "CF-Access-Client-Secret": SECRET } };
    const healthy = { id: "healthy", baseUrl: fleet[1] as string, model: UPSTREAM_MODEL };
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: GROUP, strategy: "prefix-aware", deployments: [lacking, healthy] } }), 201);
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const lines = vi.spyOn(console, "log").mockImplementation(() => undefined);

    // First turns of distinct conversations: least-loaded, ties at random, would pick the lacking
    // deployment for some; it is passed over, and none spends an attempt on it (review s63 finding 6).
    const answers: [string, number | string, string | null, string | null, string | null][] = [];
    for (let i = 0; i < 12; i++) {
      const topic = `lost-secret-${i}`;
      try {
        const { response } = await client.chat.completions.create({ model: GROUP, messages: conversation(topic), max_tokens: 2 }).withResponse();
        answers.push([topic, response.status, response.headers.get("x-kvgate-backend"), response.headers.get("x-kvgate-attempts"), response.headers.get("x-kvgate-reason")]);
      } catch (e) {
        answers.push([topic, e instanceof OpenAI.APIError ? `${e.status} ${String(e.code)}` : String(e), null, null, null]);
      }
    }
    expect(answers).toEqual(answers.map(([topic]) => [topic, 200, "healthy", "1", "least-loaded"]));

    // The operator sees it (review s63 finding 5): each request's line names it among its failures,
    // and /metrics counts it once a request under cause "unreachable", as no request's fault.
    const requestLines = lines.mock.calls.flat().map(String).filter((l) => l.startsWith('{"type":"request"')).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.model === GROUP);
    expect(requestLines.map((l) => [l.status, l.attempts, l.failures])).toEqual(answers.map(() => [200, 1, [{ group: GROUP, backend: "lacking", cause: "unreachable" }]]));
    const metrics = await (await gateway("/metrics", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } })).text();
    const series = (family: string, label: string) => metrics.split("\n").find((l) => l.startsWith(`${family}{`) && l.includes(`group="${GROUP}"`) && l.includes('backend="lacking"') && l.includes(label))?.split(" ")[1];
    expect([series("kvgate_attempt_failures_total", 'cause="unreachable"'), series("kvgate_requests_total", 'outcome="rejected"'), series("kvgate_routing_decisions_total", 'reason="failover"') ?? "0"]).toEqual(["12", "0", "0"]);

    // The next turn of a conversation: the healthy one served its first, and holds its prefix.
    const topic = "lost-secret-0";
    const { response } = await client.chat.completions.create({ model: GROUP, messages: conversation(topic, 2), max_tokens: 2 }).withResponse();
    expect([response.status, response.headers.get("x-kvgate-backend"), response.headers.get("x-kvgate-reason"), response.headers.get("x-kvgate-attempts")]).toEqual([200, "healthy", "prefix-hit", "1"]);

    // No verdict on the lacking deployment (no request reached it), and nothing left in flight.
    await noVerdict(GROUP, "healthy");
    // The operator reads what is wrong, each time, never the secret's value.
    const logged = errors.mock.calls.flat().map(String).join("\n");
    expect(logged).toContain(`backend lacking of group ${GROUP} cannot be reached as configured: headersFromEnv.CF-Access-Client-Secret names ${SECRET}, which is not set`);
    expect(logged).not.toContain(env.ACCESS_CLIENT_SECRET);
  });
});

/** Each of `backends` of `group`: kvgate_attempt_failures_total{cause="unreachable"} in the gateway's /metrics, 0 when it has none. */
async function unreachableCounts(group: string, backends: readonly string[]): Promise<number[]> {
  const metrics = (await (await gateway("/metrics", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } })).text()).split("\n");
  const series = (backend: string) => metrics.find((l) => l.startsWith("kvgate_attempt_failures_total{") && l.includes(`group="${group}"`) && l.includes(`backend="${backend}"`) && l.includes('cause="unreachable"'));
  return backends.map((b) => Number(series(b)?.split(" ")[1] ?? 0));
}

describe("a deployment whose secret this deploy lacks in each shard of a sharded group, beside a server resting after a 429", () => {
  it("is counted once a request, though the request asks its shard again after passing the prompt on", async () => {
    const group = "secret-lost-sharded";
    // This file's own switchable upstream: a 429 whose Retry-After rests its server for longer than the test.
    const limiting = inject("upstreams").switchableUrls[2] as string;
    expect((await fetch(`${limiting}/__mode`, { method: "POST", body: JSON.stringify({ mode: "429", retryAfter: "30" }) })).status).toBe(204);
    const ids = ["lacking-0", "resting-0", "lacking-1", "resting-1"];
    // Each shard holds one deployment the deploy lacks the secret of, and one server that will rest.
    expect(partition(ids, 2)).toEqual([1, 1, 0, 0]);
    const deployments = ids.map((id, i) => (id.startsWith("lacking") ? { ...lackingAt(fleet[i] as string), id } : { id, baseUrl: limiting, model: UPSTREAM_MODEL }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, shards: 2, deployments } }), 201);
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    vi.spyOn(console, "log").mockImplementation(() => undefined);
    const ask = async (topic: string) => {
      try {
        await client.chat.completions.create({ model: group, messages: conversation(topic), max_tokens: 2 });
        return "served";
      } catch (e) {
        return e instanceof OpenAI.APIError ? e.status : String(e);
      }
    };

    // The first request meets each resting server's 429 in turn; both rest from then on.
    expect(await ask("sharded-lost-0")).toBe(429);
    const resting = async () => (await Promise.all(objectNamesOf(group, 2).map(async (o) => (await env.MODEL_GROUP.getByName(o).status()).backends))).flat().filter((b) => b.restingUntil !== null).map((b) => b.id).sort();
    await vi.waitFor(async () => expect(await resting()).toEqual(["resting-0", "resting-1"]), EVENTUALLY);
    const lacking = ["lacking-0", "lacking-1"];
    // It asked both shards, the second after its first attempt failed: each counted its own once.
    expect(await unreachableCounts(group, lacking)).toEqual([1, 1]);

    // The next finds every server it could take resting: its first shard passes the prompt on to
    // the other, which passes it on too, and the first is asked again last (RouteCall.othersLeft).
    expect(await ask("sharded-lost-1")).toBe(429);
    // Each deployment the deploy lacks the secret of was passed over for that request, and counted once.
    expect(await unreachableCounts(group, lacking)).toEqual([2, 2]);
  });
});

describe("a deployment whose secret this deploy lacks, beside a server behind a firewall (review s63 findings 1 and 6)", () => {
  it("says nothing of the firewall's refusal: the only backend the deploy can reach refusing a prompt makes the refusal the request's, and charges nothing", async () => {
    const group = "secret-lost-beside-waf";
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, breaker: BREAKER, deployments: [lackingAt(fleet[0] as string), behindWaf] } }), 201);
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    // The SDK's own retries, as a client has them: each retry of an answer it may retry would charge again.
    const retrying = sdk(2);
    const refused: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      try {
        await retrying.chat.completions.create({ model: group, messages: [{ role: "user", content: `DROP TABLE users; -- ${i}` }], max_tokens: 2 });
        refused.push("served");
      } catch (e) {
        refused.push(e instanceof OpenAI.APIError ? [e.status, e.code, e.headers?.get("x-should-retry") ?? null] : String(e));
      }
    }
    expect(refused).toEqual([
      [403, "upstream_auth_error", "false"],
      [403, "upstream_auth_error", "false"],
    ]);
    // The firewall's server is not charged with the prompts it refused, nor the other with anything.
    await noVerdict(group, "waf");
    // A plain prompt is served, in one attempt: no attempt is spent on the deployment the deploy cannot reach.
    const { response } = await client.chat.completions.create({ model: group, messages: [{ role: "user", content: "hello" }], max_tokens: 2 }).withResponse();
    expect([response.status, response.headers.get("x-kvgate-backend"), response.headers.get("x-kvgate-attempts"), response.headers.get("x-kvgate-reason")]).toEqual([200, "waf", "1", "least-loaded"]);
  });
});

describe("a realtime session of a group with a deployment whose secret this deploy lacks (review s63 finding 4)", () => {
  it("opens on the other backend, every time, with no attempt spent on it", async () => {
    const group = "secret-lost-realtime";
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, deployments: [lackingAt(fleet[0] as string), { ...behindWaf, id: "healthy" }] } }), 201);
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    // Sessions stay open: under least-loaded the lacking deployment, never busy, is the pick each time.
    const opened: [number, string | null, string | null][] = [];
    const sockets: WebSocket[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await lackingDeploy(
        new Request(`https://kvgate.test/v1/realtime?model=${group}`, { headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" } }),
        true,
      );
      opened.push([res.status, res.headers.get("x-kvgate-backend"), res.headers.get("x-kvgate-attempts")]);
      if (res.webSocket) {
        res.webSocket.accept();
        sockets.push(res.webSocket);
      }
    }
    expect(opened).toEqual(opened.map(() => [101, "healthy", "1"]));
    for (const ws of sockets) ws.close(1000);
    await noVerdict(group, "healthy");
  });
});

describe("a deployment whose secret this deploy lacks, routed by an object of a release before RouteCall.unreachable", () => {
  it("is passed over by the Worker itself: its lease given back with no verdict, and no attempt spent on it", async () => {
    const group = "secret-lost-old-object";
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, deployments: [lackingAt(fleet[0] as string), { id: "healthy", baseUrl: fleet[1] as string, model: UPSTREAM_MODEL }] } }), 201);
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    // The group's object as a release before had it: it reads no `unreachable`, and may pick the lacking deployment.
    const picks: string[] = [];
    const olderObjects = {
      getByName: (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
        const stub = env.MODEL_GROUP.getByName(name, options);
        return {
          route: async (call: RouteCall) => {
            const { unreachable: _, ...older } = call;
            const answer = await stub.route(older);
            if ("backendId" in answer) picks.push(answer.backendId);
            return answer;
          },
          release: (released: LeaseRelease[], renewed: LeaseRenewal[]) => stub.release(released, renewed),
        };
      },
    };
    const olderEnv = { ...withoutSecret, MODEL_GROUP: olderObjects } as unknown as Env;
    const answers: unknown[] = [];
    for (let i = 0; i < 8; i++) {
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        new Request("https://kvgate.test/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" }, body: JSON.stringify({ model: group, messages: conversation(`older-${i}`), max_tokens: 2 }) }),
        olderEnv,
        ctx,
      );
      await waitOnExecutionContext(ctx);
      answers.push([res.status, res.headers.get("x-kvgate-backend"), res.headers.get("x-kvgate-attempts")]);
      await res.text();
    }
    expect(answers).toEqual(answers.map(() => [200, "healthy", "1"]));
    // Least-loaded, the never busy lacking deployment is that object's pick for some of them.
    expect(picks).toContain("lacking");
    await noVerdict(group, "healthy");
  });
});
