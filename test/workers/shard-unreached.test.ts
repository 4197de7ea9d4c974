import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import type { BackendSnapshot } from "../../src/routing/protocol.ts";
import { partition, shardObjectName } from "../../src/sharding/partition.ts";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { VPC_HOST } from "../support/vpc-stand-in.ts";
import { admin, ok } from "./admin.ts";
import { EVENTUALLY } from "./gateway.ts";

/**
 * A model group over two routing objects, one server on each (partition splits two ids one-one),
 * while the object of the shard holding the healthy server cannot be reached (the runtime's
 * "overloaded", an object being reset): the other server's refusal — a proxy's 403, a 404 for the
 * endpoint — is not the group's word, since the group's other server was never asked. The request
 * gets the 503 routing_unavailable a client tries again, as a group of one routing object
 * unreachable answers, and a lone 403 stays its backend's own (charged), not the request's.
 */

const fleet = inject("upstreams").fleetUrls;
const HEALTHY = "serving";
const ids = (other: string) => [other, HEALTHY];
const healthy = { id: HEALTHY, baseUrl: fleet[0] as string, model: UPSTREAM_MODEL };
/** Behind Access, reached through the binding without the service token: its proxy answers every request 403. */
const tokenMissing = { id: "token-missing", baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC" };
/** Behind a path that leads nowhere: the engine's 404 for the endpoint ({"detail":"Not Found"}). */
const lacking = { id: "lacking", baseUrl: `${fleet[1] as string}/dropped`, model: UPSTREAM_MODEL };

/** A group of two servers over two shards, and the name of the healthy server's shard object. */
async function shardedPair(name: string, other: { id: string }, settings: Record<string, unknown> = {}): Promise<string> {
  const shards = partition(ids(other.id), 2);
  expect(new Set(shards).size).toBe(2);
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name, shards: 2, deployments: [other, healthy], ...settings } }), 201);
  return shardObjectName(name, shards[1] as number);
}

/** The real routing objects, but every call a Worker makes to `object` throws, as an overloaded one's does. */
function without(object: string): unknown {
  return {
    getByName: (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
      if (name !== object) return env.MODEL_GROUP.getByName(name, options);
      const fail = async () => {
        throw new Error("Durable Object is overloaded. Too many requests queued.");
      };
      return { route: fail, release: fail, status: fail, metrics: fail };
    },
  };
}

/** `req` through the gateway Worker with `object` unreachable. */
async function call(req: Request, object: string): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(req, { ...env, MODEL_GROUP: without(object) } as Env, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

function chatRequest(model: string): Request {
  const body = { model, messages: [{ role: "user", content: "How deep is the harbour at low tide?".padEnd(400, " and why?") }], max_tokens: 4 };
  return new Request("https://kvgate.test/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

function handshake(model: string): Request {
  return new Request(`https://kvgate.test/v1/realtime?model=${model}`, {
    headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" },
  });
}

/** The answer's status, its x-should-retry and its error code. */
async function answerOf(res: Response): Promise<[number, string | null, string | undefined]> {
  const text = await res.text();
  const code = text.startsWith("{") ? (JSON.parse(text) as { error?: { code?: string } }).error?.code : undefined;
  return [res.status, res.headers.get(SHOULD_RETRY), code];
}
const SHOULD_RETRY = "x-should-retry";

/** Backend `id` of `group` as its own shard's object counts it, once nothing of it is in flight. */
async function settled(group: string, id: string): Promise<BackendSnapshot> {
  const object = shardObjectName(group, partition(ids(id), 2)[0] as number);
  let row: BackendSnapshot | undefined;
  await vi.waitFor(async () => {
    row = (await env.MODEL_GROUP.getByName(object).status()).backends.find((b) => b.id === id);
    expect(row?.inFlight).toBe(0);
    expect((row?.failed ?? 0) + (row?.rejected ?? 0)).toBeGreaterThan(0);
  }, EVENTUALLY);
  return row as BackendSnapshot;
}

/** A 503 routing_unavailable a client tries again: what a group of one routing object answers unreachable. */
const ROUTING_UNAVAILABLE: [number, string | null, string] = [503, null, "routing_unavailable"];

describe("a sharded group whose healthy server's shard object cannot be reached", () => {
  for (const [what, ask, tag] of [
    ["a request", chatRequest, ""],
    ["a realtime handshake", handshake, "-rt"],
  ] as const) {
    it(`answers ${what} a lone server's proxy refused (403) with a 503 to try again, and charges that server with its 403`, async () => {
      const group = `unreached-refused${tag}`;
      const unreached = await shardedPair(group, tokenMissing);
      expect(await answerOf(await call(ask(group), unreached))).toEqual(ROUTING_UNAVAILABLE);
      // Its Access token missing is its own: charged, as when the other server serves the request.
      const row = await settled(group, tokenMissing.id);
      expect([row.failed, row.rejected]).toEqual([1, 0]);
    });

    it(`answers ${what} a lone server answered 404 for the endpoint with a 503 to try again, not a final "not served"`, async () => {
      const group = `unreached-unserved${tag}`;
      const unreached = await shardedPair(group, lacking);
      expect(await answerOf(await call(ask(group), unreached))).toEqual(ROUTING_UNAVAILABLE);
      // No verdict: the group's word on the endpoint was never given.
      const row = await settled(group, lacking.id);
      expect([row.failed, row.rejected]).toEqual([0, 1]);
    });
  }

  it("with the other server resting, blames the unreachable routing object, not breakers: 503 routing_unavailable", async () => {
    // A server that refuses connections, whose breaker opens on its first failure and stays open.
    const dead = { id: "dead", baseUrl: inject("upstreams").deadUrl, model: UPSTREAM_MODEL };
    const breaker = { consecutiveFailures: 1, openMs: 600_000, probeIntervalMs: 600_000 };
    const unreached = await shardedPair("unreached-resting", dead, { breaker });
    await (await call(chatRequest("unreached-resting"), unreached)).text();
    await vi.waitFor(async () => expect((await settled("unreached-resting", dead.id)).breaker.state).toBe("open"), EVENTUALLY);
    // Its shard has no backend to give; the other's object may have a healthy one.
    expect(await answerOf(await call(chatRequest("unreached-resting"), unreached))).toEqual(ROUTING_UNAVAILABLE);
  });
});
