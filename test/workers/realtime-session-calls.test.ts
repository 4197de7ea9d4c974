import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import type { Env } from "../../workers/env.ts";
import worker from "../../workers/gateway/index.ts";
import { admin, ok } from "./admin.ts";
import { expectIdle } from "./gateway.ts";
import { tenants } from "./tenants.ts";

/**
 * The Durable Object calls an open realtime session makes. A session lives in its handshake's
 * invocation, and Cloudflare caps the subrequests of one invocation (1,000 to Durable Objects on
 * a free plan, 10,000 by default on a paid one): every call its checks make counts against it for
 * as long as the session lasts. The Worker reaches the objects through bindings that count the
 * calls they pass on, by method.
 */

const fleet = inject("upstreams").fleetUrls;
const PRICING = { promptUsdPerMillion: 1, completionUsdPerMillion: 1 };
const HANDSHAKE = { upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" };

afterEach(() => {
  vi.restoreAllMocks();
});

type Calls = Map<string, number>;

/** `ns` with each stub's method calls counted in `calls` (as `snapshot`, `lookup`, …) and passed on. */
function counting<T extends Rpc.DurableObjectBranded>(ns: DurableObjectNamespace<T>, calls: Calls): DurableObjectNamespace<T> {
  const getByName = (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
    const stub = ns.getByName(name, options);
    return new Proxy(stub, {
      get(target, method) {
        const real: unknown = Reflect.get(target, method);
        if (typeof real !== "function" || typeof method !== "string") return real;
        return (...args: unknown[]) => {
          calls.set(method, (calls.get(method) ?? 0) + 1);
          // Reflect.apply: an RPC method's own .apply would be taken for a method of the object's.
          return Reflect.apply(real, target, args);
        };
      },
    });
  };
  return new Proxy(ns, { get: (target, p) => (p === "getByName" ? getByName : Reflect.get(target, p)) });
}

describe("an open realtime session of a key whose budget is in dollars alone", () => {
  it("reads the fleet registry no more often than it reads its key from the tenants object, not once a second: about 330 registry reads in a session's hour, not 3,600", async () => {
    const registry: Calls = new Map();
    const keys: Calls = new Map();
    const bindings = { ...env, FLEET: counting(env.FLEET, registry), TENANTS: counting(env.TENANTS, keys) } as unknown as Env;
    const s = await openSession("rt-dollars", bindings);
    // From here on, the session's own calls: its key checked every second, nothing else in the isolate.
    registry.clear();
    keys.clear();
    // The key cache reads a record in use again once it is 5 s old: the session's first read of its key.
    await expect.poll(() => keys.get("lookup") ?? 0, { timeout: 12_000, interval: 50 }).toBeGreaterThanOrEqual(1);
    expect(s.closed()).toBeNull();
    // Before, the fleet was read at every check (once a second): 4 or more by now, 3,600 an hour.
    expect(registry.get("snapshot") ?? 0).toBeLessThanOrEqual(keys.get("lookup") ?? 0);
    await s.close();
    await expectIdle("rt-dollars");
  }, 30_000);

  it("is still closed once the group serving it loses its pricing, when the isolate's fleet is as old as a key record may be (10 s): the change made through another instance", async () => {
    const s = await openSession("rt-unpriced", env as unknown as Env);
    const at = Date.now();
    const changed = await env.FLEET.getByName(REGISTRY_NAME).command({ op: "update-group", group: "rt-unpriced", patch: { pricing: null } });
    expect(changed).toMatchObject({ ok: true });
    // The isolate's fleet and the key's record 10 s old: the next check reads both again.
    vi.spyOn(Date, "now").mockImplementation(() => at + 10_000);
    await expect.poll(s.closed, { timeout: 5_000, interval: 50 }).toMatch(/^1008 model "rt-unpriced" has no pricing, and API key sk-kvg-\w+… has a budget in dollars alone/);
    vi.restoreAllMocks();
    await s.done();
    await expectIdle("rt-unpriced");
  }, 30_000);
});

/**
 * A session on a new priced group `group` (one simulated server) of a new key whose only budget is
 * in dollars, opened through `bindings`: `closed()` its close's code and reason once it came.
 */
async function openSession(group: string, bindings: Env): Promise<{ closed: () => string | null; close: () => Promise<void>; done: () => Promise<void> }> {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, pricing: PRICING, deployments: [{ id: "sim-0", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } }), 201);
  const issued = await tenants().create({ name: "dollars alone", budget_usd: 100 });
  if (!issued.ok) throw new Error(issued.message);
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`https://kvgate.test/v1/realtime?model=${group}`, { headers: { ...HANDSHAKE, authorization: `Bearer ${issued.value.key}` } }), bindings, ctx);
  expect(res.status, res.status === 101 ? "" : await res.text()).toBe(101);
  const ws = res.webSocket as WebSocket;
  let closed: string | null = null;
  ws.addEventListener("close", (e) => {
    closed = `${e.code} ${e.reason}`;
  });
  ws.accept();
  const done = () => waitOnExecutionContext(ctx);
  return { closed: () => closed, done, close: () => (ws.close(1000), done()) };
}
