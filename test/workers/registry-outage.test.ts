import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";

/**
 * The fleet registry failing (its Durable Object overloaded, or being reset) under a running
 * gateway. The runtime cannot be made to fail a Durable Object call on purpose, so the registry's
 * binding is a stand-in whose every call throws, given to the Worker in the env the runtime
 * passes it; the rest is the real gateway, its routing objects and the simulated fleet.
 */

let registryCalls = 0;
const failingRegistry = {
  getByName: () => ({
    snapshot: async () => {
      registryCalls++;
      throw new Error("Durable Object is overloaded. Too many requests queued.");
    },
  }),
};

async function chat(model: string, registry: unknown = env.FLEET): Promise<Response> {
  const ctx = createExecutionContext();
  const req = new Request("https://kvgate.test/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 2 }),
  });
  const res = await worker.fetch(req, { ...env, FLEET: registry } as Env, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

/**
 * An admin change through the gateway whose commands reach the real registry, while the snapshot
 * the Worker reads after one fails.
 */
async function changeWhileReadsFail(method: string, path: string, body: unknown): Promise<Response> {
  const readFails = {
    getByName: (name: string) => {
      const real = env.FLEET.getByName(name);
      return { command: (cmd: Parameters<typeof real.command>[0]) => real.command(cmd), records: () => real.records(), snapshot: async () => Promise.reject(new Error("Durable Object is overloaded. Too many requests queued.")) };
    },
  };
  const ctx = createExecutionContext();
  const req = new Request(`https://kvgate.test/admin/v1${path}`, { method, headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  const res = await worker.fetch(req, { ...env, FLEET: readFails } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

describe("the fleet registry unreachable", () => {
  it("an unknown model is still a 404, the registry is asked again at most once a second, and known models are served", async () => {
    // The isolate reads its fleet with its first request.
    const first = await chat("routing");
    expect(first.status).toBe(200);
    await first.text();
    // Past the once-a-second bound on reading it again for a model it does not know.
    await new Promise((r) => setTimeout(r, 1100));
    registryCalls = 0;
    for (let i = 0; i < 3; i++) {
      const res = await chat(`no-such-model-${i}`, failingRegistry);
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
    }
    expect(registryCalls).toBe(1);
    const known = await chat("routing", failingRegistry);
    expect(known.status).toBe(200);
    await known.text();
  });
});

describe("the fleet registry failing a read right after it took a change", () => {
  it("the admin API still answers the change as applied: an error would have the operator retry one that holds (a 409, or a second removal's 404)", async () => {
    const warm = await chat("routing");
    expect(warm.status).toBe(200);
    await warm.text();
    const group = { name: "outage-after-change", deployments: [{ id: "a", baseUrl: "http://127.0.0.1:9/", model: "m" }] };
    const res = await changeWhileReadsFail("POST", "/groups", group);
    const text = await res.text();
    expect(res.status, text).toBe(201);
    expect(JSON.parse(text)).toMatchObject({ ok: true, changed: ["outage-after-change"], routing: "applied" });
    expect((await env.FLEET.getByName("fleet").snapshot()).groups.map((g) => g.name)).toContain("outage-after-change");
  });
});

describe("the fleet registry unreachable when a request finds its group changed", () => {
  it("the request is served by the group as the isolate holds it", async () => {
    const warm = await chat("routing");
    expect(warm.status).toBe(200);
    await warm.text();
    // The change reaches the registry and the group's routing object; the isolate's read of the fleet after it fails.
    const changed = await changeWhileReadsFail("PATCH", "/groups/routing", { aliases: ["routing-renamed-in-outage"] });
    expect(changed.status, await changed.text()).toBe(200);
    // The admin route's own read of the fleet after the change failed: past the second that bounds the next.
    await new Promise((r) => setTimeout(r, 1100));
    registryCalls = 0;
    for (let i = 0; i < 5; i++) {
      const res = await chat("routing", failingRegistry);
      expect(res.status, await res.text()).toBe(200);
    }
    // The routing object's newer revision sent the first request to the registry, which did not
    // answer; the next go on with the fleet the isolate holds, not each to a registry down (one more
    // only if these took past the second the bound allows).
    expect(registryCalls).toBeGreaterThan(0);
    expect(registryCalls).toBeLessThanOrEqual(2);
  });
});

describe("the admin API while the fleet registry cannot be reached", () => {
  it("answers 503 saying so, not a 500 that names nothing; a change's answer says it may have been made", async () => {
    const warm = await chat("routing");
    expect(warm.status).toBe(200);
    await warm.text();
    // As the runtime's own error says it: `overloaded` (Cloudflare's Durable Objects error handling).
    const overloaded = async () => Promise.reject(Object.assign(new Error("Durable Object is overloaded. Too many requests queued."), { overloaded: true }));
    const down = { getByName: () => ({ records: overloaded, record: overloaded, command: overloaded, snapshot: overloaded }) };
    const call = (method: string, path: string, body?: unknown) => adminCallWith(down, method, path, body);
    const unavailable = { status: 503, retryAfter: "1", error: { type: "service_unavailable", code: "routing_unavailable", param: null, message: "the fleet registry is unavailable" } };
    for (const path of ["/status", "/fleet", "/groups", "/groups/routing", "/groups/routing/deployments"]) expect(await call("GET", path), path).toEqual(unavailable);
    const changes: [string, string, unknown?][] = [
      ["POST", "/groups/routing/deployments/sim-0/drain"],
      ["PATCH", "/groups/routing", { saturation: 9 }],
      ["DELETE", "/groups/routing"],
    ];
    for (const [method, path, body] of changes) {
      expect(await call(method, path, body), path).toEqual({ ...unavailable, error: { ...unavailable.error, message: "the fleet registry did not answer: the change may or may not have been made; read the fleet back before sending it again" } });
    }
  });
});

/** An admin call through the gateway, whose registry binding is `registry`. */
async function adminCallWith(registry: unknown, method: string, path: string, body?: unknown): Promise<{ status: number; retryAfter: string | null; error: { type: string; code: string; param: string | null; message: string } }> {
  const ctx = createExecutionContext();
  const headers = { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}`, "content-type": "application/json" };
  const res = await worker.fetch(new Request(`https://kvgate.test/admin/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }), { ...env, FLEET: registry } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  return { status: res.status, retryAfter: res.headers.get("retry-after"), error: ((await res.json()) as { error: { type: string; code: string; param: string | null; message: string } }).error };
}

describe("the admin API when the fleet registry fails for a reason a retry cannot mend", () => {
  it("answers 500, not a 503 that asks for the retry (a bug in the registry, a write its storage refuses)", async () => {
    const broken = async () => Promise.reject(new TypeError("Cannot read properties of undefined (reading 'deployments')"));
    const registry = { getByName: () => ({ records: broken, record: broken, command: broken, snapshot: broken }) };
    for (const [method, path] of [
      ["GET", "/groups"],
      ["POST", "/groups/routing/deployments/sim-0/drain"],
    ] as const) {
      const r = await adminCallWith(registry, method, path);
      expect([path, r.status, r.retryAfter, r.error.code]).toEqual([path, 500, null, "internal_error"]);
    }
  });
});
