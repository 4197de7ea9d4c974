import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import type { BackendSnapshot, LeaseOutcome } from "../../src/routing/protocol.ts";
import { partition, shardObjectName } from "../../src/sharding/partition.ts";
import type { Failure } from "../../src/upstream/retry.ts";
import { HeldFailure } from "../../workers/gateway/held-failure.ts";
import worker from "../../workers/gateway/index.ts";
import type { HeldLease } from "../../workers/gateway/route-client.ts";
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

/** The answer's status and its x-should-retry. */
async function answerOf(res: Response): Promise<[number, string | null]> {
  await res.text();
  return [res.status, res.headers.get(SHOULD_RETRY)];
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

/** A 503 a client tries again: what a group of one routing object answers unreachable. */
const TRY_AGAIN: [number, string | null] = [503, null];

describe("a sharded group whose healthy server's shard object cannot be reached", () => {
  it("answers a lone server's proxy 403 with a 503 to try again, and charges that server with its 403", async () => {
    const unreached = await shardedPair("unreached-refused", tokenMissing);
    expect(await answerOf(await call(chatRequest("unreached-refused"), unreached))).toEqual(TRY_AGAIN);
    // Its Access token missing is its own: charged, as when the other server serves the request.
    const row = await settled("unreached-refused", tokenMissing.id);
    expect([row.failed, row.rejected]).toEqual([1, 0]);
  });

  it("answers a lone server's 404 for the endpoint with a 503 to try again, not 404 endpoint_not_served", async () => {
    const unreached = await shardedPair("unreached-unserved", lacking);
    expect(await answerOf(await call(chatRequest("unreached-unserved"), unreached))).toEqual(TRY_AGAIN);
    // No verdict: the group's word on the endpoint was never given.
    const row = await settled("unreached-unserved", lacking.id);
    expect([row.failed, row.rejected]).toEqual([0, 1]);
  });

  it("answers a realtime handshake a lone server's proxy refused with a 503 to try again, and charges that server", async () => {
    const unreached = await shardedPair("unreached-refused-rt", tokenMissing);
    expect(await answerOf(await call(handshake("unreached-refused-rt"), unreached))).toEqual(TRY_AGAIN);
    const row = await settled("unreached-refused-rt", tokenMissing.id);
    expect([row.failed, row.rejected]).toEqual([1, 0]);
  });

  it("answers a realtime handshake a lone server answered 404 with a 503 to try again, not its 404 with x-should-retry: false", async () => {
    const unreached = await shardedPair("unreached-unserved-rt", lacking);
    expect(await answerOf(await call(handshake("unreached-unserved-rt"), unreached))).toEqual(TRY_AGAIN);
  });
});

/** A lease that records how it was settled (the first settling counts, as a real one's). */
function heldLease(backendId: string, settled: Map<string, LeaseOutcome>): HeldLease {
  return {
    backendId,
    object: "pair",
    renewEveryMs: 1000,
    renewIfDue: () => {},
    keepRenewed: () => {},
    charge: async () => {},
    watchLimits: () => {},
    limitReached: null,
    began: () => {},
    settle: (outcome) => void (settled.has(backendId) || settled.set(backendId, outcome)),
  };
}

/** A proxy's 403 (src/upstream/answer.ts "refused"). */
const proxyRefusal: Failure = { cause: "5xx", kind: "credentials", retryAfterMs: null };

describe("a refusal of a sharded group one of whose shard objects was not reached", () => {
  const parsed = parseConfig({ auth: { masterKeyEnv: "KVGATE_MASTER_KEY" }, modelGroups: [{ name: "pair", shards: 2, deployments: [tokenMissing, healthy] }] });
  if (!parsed.ok) throw new Error(parsed.error);
  const pair = parsed.config.groups[0] as ResolvedGroup;

  /** A lone 403 of `token-missing`, then the group's refusal with it excluded: how it was settled, and the answer's verdict. */
  function loneRefusalThen(unreached: boolean) {
    const settled = new Map<string, LeaseOutcome>();
    const held = new HeldFailure();
    held.attempting("pair", 2);
    held.failed(heldLease(tokenMissing.id, settled), "upstream-error", proxyRefusal);
    held.refused("no-backend", pair, [tokenMissing.id], unreached);
    const verdict = { untried: held.untriedRefusal, own: held.answersOwnRefusal };
    held.end();
    return { ...verdict, settled: settled.get(tokenMissing.id) };
  }

  it("reached whole, is the group's: the other server rests, and the lone 403 is the request's", () => {
    expect(loneRefusalThen(false)).toEqual({ untried: undefined, own: false, settled: "rejected" });
  });

  it("not reached whole, is one with a server not tried: answered as such, and the lone 403 is its backend's own", () => {
    expect(loneRefusalThen(true)).toEqual({ untried: "no-backend", own: true, settled: "upstream-error" });
  });
});
