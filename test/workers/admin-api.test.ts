import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import type { ResolvedGroup } from "../../src/config/load.ts";
import type { DeploymentList, DeploymentRow, FleetStatus, GroupList } from "../../src/fleet/admin-api.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import type { RouteRefusal } from "../../src/routing/protocol.ts";
import type { KeyList } from "../../src/tenants/admin-api.ts";
import { holdLease, route, type Routed } from "../../workers/gateway/route-client.ts";
import type { Env } from "../../workers/env.ts";
import worker from "../../workers/gateway/index.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok, refused } from "./admin.ts";
import { chat, EVENTUALLY, gateway } from "./gateway.ts";

/**
 * The admin API (/admin/v1) over the fleet registry, in the Workers runtime: who may use it, and
 * that each change holds for the next requests through the gateway.
 */

const fleet = inject("upstreams").fleetUrls;
const sim = (i: number, id = `sim-${i}`) => ({ id, baseUrl: fleet[i] as string, model: UPSTREAM_MODEL });

/** The backends that served `n` chat requests to `model`. */
async function servedBy(model: string, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await chat(model, [{ role: "user", content: `request ${i} ${Math.random()}` }]);
    expect(res.status).toBe(200);
    await res.text();
    out.push(res.headers.get("x-kvgate-backend") ?? "");
  }
  return out;
}

const row = (group: string, id: string) => ok<DeploymentRow>(admin(`/admin/v1/groups/${group}/deployments/${id}`));
const fleetRev = async () => (await ok<{ rev: number }>(admin("/admin/v1/fleet"))).rev;

/** The names of every key, read page after page. */
async function keyNames(): Promise<(string | null)[]> {
  const names: (string | null)[] = [];
  for (let after = ""; ; ) {
    const page = await ok<KeyList>(admin(`/admin/v1/keys${after ? `?after=${after}` : ""}`));
    names.push(...page.data.map((k) => k.name));
    if (!page.has_more || page.last_id === null) return names;
    after = page.last_id;
  }
}

/** The group as the registry resolves it now: what a Worker that has read it routes with. */
async function resolved(name: string): Promise<ResolvedGroup> {
  const g = (await env.FLEET.getByName(REGISTRY_NAME).snapshot()).groups.find((x) => x.name === name);
  if (!g) throw new Error(`no group ${name} in the registry`);
  return g;
}

describe("the admin API's keys", () => {
  it("answers only to the admin key: not to clients' master key, nor the register key", async () => {
    expect((await admin("/admin/v1/groups", {}, "")).status).toBe(401);
    const noKey = await gateway("/admin/v1/groups", {}, false);
    expect(noKey.status).toBe(401);
    await noKey.text();
    for (const key of [env.KVGATE_MASTER_KEY, env.KVGATE_REGISTER_KEY, `${env.KVGATE_ADMIN_KEY}x`]) {
      const e = await refused(admin("/admin/v1/groups", {}, key), 401);
      expect(e.type).toBe("authentication_error");
      expect(JSON.stringify(e)).not.toContain(env.KVGATE_ADMIN_KEY);
    }
    const list = await ok<GroupList>(admin("/admin/v1/groups"));
    expect(list.data.find((g) => g.name === "routing")).toMatchObject({ source: "config", aliases: ["routing-alias"] });
    // A heartbeat takes the register key (or the admin key), never a client's.
    const beat = { group: "routing", id: "nobody", baseUrl: fleet[0], model: UPSTREAM_MODEL };
    await refused(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_MASTER_KEY), 401);
    // The master key opens no admin route, and an admin route that does not exist is a 404.
    await refused(admin("/admin/v1/nothing-here"), 404);
  });

  // A heartbeat takes the register key or the admin key: either set to the client key's value would let every client register a server.
  for (const [name, what] of [["KVGATE_REGISTER_KEY", "register key"], ["KVGATE_ADMIN_KEY", "admin key"]] as const) {
    it(`takes no heartbeat while the ${what} is the client key: every client could register a server and be sent others' prompts`, async () => {
      const beat = { group: "routing", id: "alike", baseUrl: fleet[0], model: UPSTREAM_MODEL };
      const ctx = createExecutionContext();
      const req = new Request("https://kvgate.test/admin/v1/heartbeats", { method: "POST", headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" }, body: JSON.stringify(beat) });
      const res = await worker.fetch(req, { ...env, [name]: env.KVGATE_MASTER_KEY } as Env, ctx);
      await waitOnExecutionContext(ctx);
      const e = await refused(res, 401);
      expect(e.message).toBe(`the ${what} (${name}) must differ from the client key (KVGATE_MASTER_KEY); heartbeats are off until it does`);
      expect((await env.FLEET.getByName(REGISTRY_NAME).snapshot()).groups.find((g) => g.name === "routing")?.deployments.map((d) => d.id)).not.toContain("alike");
    });
  }

  // The admin key set to the metrics key's value turns the admin API off, but a heartbeat took the admin key: a Prometheus scraper's key registered servers.
  it("takes no heartbeat with the admin key while it is the metrics key, a scraper's: the register key alone, which works on", async () => {
    const shared = `sk-shared-${crypto.randomUUID()}`;
    const scraped = { ...env, KVGATE_ADMIN_KEY: shared, KVGATE_METRICS_KEY: shared } as Env;
    const post = async (key: string, id: string) => {
      const ctx = createExecutionContext();
      const req = new Request("https://kvgate.test/admin/v1/heartbeats", { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ group: "routing", id, baseUrl: fleet[0], model: UPSTREAM_MODEL, ttlSeconds: 60 }) });
      const res = await worker.fetch(req, scraped, ctx);
      await waitOnExecutionContext(ctx);
      return res;
    };
    const logged = vi.spyOn(console, "error");
    const e = await refused(post(shared, "scraper"), 401);
    expect(e.type).toBe("authentication_error");
    expect(JSON.stringify(e)).not.toContain(shared);
    // The caller learns nothing more; the operator is told why, once per isolate, never the value.
    await refused(post(shared, "scraper"), 401);
    const why = logged.mock.calls.map((c) => c.join(" ")).filter((l) => l.includes("auth.adminKeyEnv"));
    logged.mockRestore();
    expect(why).toEqual([expect.stringMatching(/heartbeats with the admin key are refused.*auth\.metricsKeyEnv/)]);
    expect(why.join()).not.toContain(shared);
    await ok(post(env.KVGATE_REGISTER_KEY, "registered"));
    const ids = (await env.FLEET.getByName(REGISTRY_NAME).snapshot()).groups.find((g) => g.name === "routing")?.deployments.map((d) => d.id);
    expect(ids).not.toContain("scraper");
    expect(ids).toContain("registered");
    await ok(admin("/admin/v1/groups/routing/deployments/registered", { method: "DELETE" }));
  });
});

describe("deployments through the admin API", () => {
  it("an added one takes traffic; a drained one finishes what it has and takes nothing new; a removed one is gone", async () => {
    const created = await ok<{ routing: string; changed: string[] }>(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-live", strategy: "round-robin", deployments: [sim(0, "a")] } }), 201);
    expect(created).toMatchObject({ routing: "applied", changed: ["admin-live"] });
    expect(await servedBy("admin-live", 2)).toEqual(["a", "a"]);

    await ok(admin("/admin/v1/groups/admin-live/deployments", { method: "POST", json: sim(1, "b") }), 201);
    await vi.waitFor(async () => expect(await servedBy("admin-live", 4)).toContain("b"), EVENTUALLY);

    // A request in flight on b (its lease held), then b drains.
    const ctx = createExecutionContext();
    const g = await resolved("admin-live");
    const held = (await route(env, ctx, g, { chain: [], blocks: 0 }, ["a"], g.name)) as Routed | RouteRefusal;
    if ("refused" in held) throw new Error(`refused: ${held.refused}`);
    expect(held.backendId).toBe("b");
    const lease = holdLease(held, g, env, ctx, 10);
    await ok(admin("/admin/v1/groups/admin-live/deployments/b/drain", { method: "POST" }));
    expect(await row("admin-live", "b")).toMatchObject({ state: "draining", inFlight: 1, takesRequests: false, drained: false });
    expect(await servedBy("admin-live", 6)).toEqual(Array(6).fill("a"));
    lease.settle("ok");
    await waitOnExecutionContext(ctx);
    await vi.waitFor(async () => expect(await row("admin-live", "b")).toMatchObject({ inFlight: 0, drained: true }), EVENTUALLY);

    await ok(admin("/admin/v1/groups/admin-live/deployments/b/enable", { method: "POST" }));
    await vi.waitFor(async () => expect(await servedBy("admin-live", 4)).toContain("b"), EVENTUALLY);

    await ok(admin("/admin/v1/groups/admin-live/deployments/b", { method: "DELETE" }));
    await refused(admin("/admin/v1/groups/admin-live/deployments/b"), 404);
    expect(await servedBy("admin-live", 4)).toEqual(Array(4).fill("a"));
  });

  it("says a drained deployment is drained only when its routing object answered: unknown in flight is not safe to stop", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-unseen", strategy: "round-robin", deployments: [sim(0, "a"), sim(1, "b")] } }), 201);
    expect(await servedBy("admin-unseen", 2)).toHaveLength(2);
    await ok(admin("/admin/v1/groups/admin-unseen/deployments/b/drain", { method: "POST" }));
    // Its request's release reaches the object in the isolate's next batch.
    await vi.waitFor(async () => expect(await row("admin-unseen", "b")).toMatchObject({ state: "draining", inFlight: 0, drained: true }), EVENTUALLY);
    // The group's routing object does not answer (overloaded, or being reset): nothing is known of b's requests.
    const unanswered = {
      getByName: (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
        const real = env.MODEL_GROUP.getByName(name, options);
        return new Proxy(real, { get: (o, p) => (p === "status" ? async () => Promise.reject(new Error("Durable Object is overloaded.")) : Reflect.get(o, p)) });
      },
    };
    const read = async (path: string) => {
      const ctx = createExecutionContext();
      const res = await worker.fetch(new Request(`https://kvgate.test/admin/v1${path}`, { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } }), { ...env, MODEL_GROUP: unanswered } as unknown as Env, ctx);
      await waitOnExecutionContext(ctx);
      return res;
    };
    const res = await read("/groups/admin-unseen/deployments/b");
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ state: "draining", inFlight: null, drained: false });
    // The fleet's status says the group's in flight is unknown too, not 0.
    const fleet = (await ok<FleetStatus>(read("/status"))).groups.find((g) => g.name === "admin-unseen");
    expect(fleet).toMatchObject({ routingRev: null, inFlight: null });
  });

  it("answers 503 for a group's decisions while its routing object does not answer, not a 500 naming nothing", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-undecided", deployments: [sim(0, "a")] } }), 201);
    const unanswered = {
      getByName: (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
        const real = env.MODEL_GROUP.getByName(name, options);
        return new Proxy(real, { get: (o, p) => (p === "decisions" ? async () => Promise.reject(new Error("Durable Object is overloaded.")) : Reflect.get(o, p)) });
      },
    };
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request("https://kvgate.test/admin/v1/groups/admin-undecided/decisions", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } }), { ...env, MODEL_GROUP: unanswered } as unknown as Env, ctx);
    await waitOnExecutionContext(ctx);
    expect(await refused(res, 503)).toEqual({ type: "service_unavailable", code: "routing_unavailable", param: null, message: 'the routing object of group "admin-undecided" did not answer' });
  });

  it("a weight and a cap change hold for the next requests", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-weights", deployments: [sim(0, "w")] } }), 201);
    const patched = await ok<{ changed: string[] }>(admin("/admin/v1/groups/admin-weights/deployments/w", { method: "PATCH", json: { weight: 5, maxInFlight: 3 } }));
    expect(patched.changed).toEqual(["admin-weights"]);
    expect(await row("admin-weights", "w")).toMatchObject({ weight: 5, maxInFlight: 3, url: fleet[0], model: UPSTREAM_MODEL });
  });

  it("a group PATCH changes the nested settings it names and keeps the others", async () => {
    const failover = { maxAttempts: 5, on: ["5xx"], backoffMs: 7, backoffMaxMs: 70, retryAfterCapMs: 700 };
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-nested", failover, breaker: { openMs: 9000, probePath: "/ready" }, pricing: { promptUsdPerMillion: 1, completionUsdPerMillion: 2 }, deployments: [sim(0, "n")] } }), 201);
    const settings = () => ok<Record<string, unknown>>(admin("/admin/v1/groups/admin-nested"));
    const patch = (json: unknown) => admin("/admin/v1/groups/admin-nested", { method: "PATCH", json });
    await ok(patch({ failover: { maxAttempts: 2 } }));
    expect((await settings()).failover).toEqual({ ...failover, maxAttempts: 2 });
    await ok(patch({ breaker: { windowMs: 20_000 }, pricing: { completionUsdPerMillion: 3 } }));
    expect(await settings()).toMatchObject({
      breaker: { openMs: 9000, probePath: "/ready", windowMs: 20_000, consecutiveFailures: 5 },
      pricing: { promptUsdPerMillion: 1, completionUsdPerMillion: 3 },
    });
    // An array is replaced, not merged; the group that results is checked whole, and a bad field named by its path.
    await ok(patch({ failover: { on: ["connect"] } }));
    expect((await settings()).failover).toEqual({ ...failover, maxAttempts: 2, on: ["connect"] });
    expect(await refused(patch({ failover: { maxAttempts: 0 } }), 400)).toMatchObject({ param: "failover.maxAttempts" });
    expect((await refused(patch({ name: "renamed" }), 400)).message).toMatch(/unknown key name/);
    expect(await refused(patch({ failover: { maxAttemps: 3 } }), 400)).toMatchObject({ param: "failover" });
    const proto = admin("/admin/v1/groups/admin-nested", { method: "PATCH", body: '{"failover": {"__proto__": {"maxAttempts": 9}}}' });
    expect((await refused(proto, 400)).message).toMatch(/unknown key __proto__/);
    expect((await settings()).failover).toEqual({ ...failover, maxAttempts: 2, on: ["connect"] });
  });

  it("a deployment PATCH replaces headersFromEnv whole: the headers it names are all the deployment is sent", async () => {
    const access = { "CF-Access-Client-Id": "ACCESS_CLIENT_ID", "CF-Access-Client-Secret": "ACCESS_CLIENT_SECRET" };
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-headers", deployments: [{ ...sim(0, "h"), headersFromEnv: access }] } }), 201);
    await ok(admin("/admin/v1/groups/admin-headers/deployments/h", { method: "PATCH", json: { headersFromEnv: { "CF-Access-Client-Id": "ACCESS_CLIENT_ID" } } }));
    const exported = await ok<{ modelGroups: { name: string; deployments: { headersFromEnv?: unknown }[] }[] }>(admin("/admin/v1/fleet"));
    expect(exported.modelGroups.find((g) => g.name === "admin-headers")?.deployments[0]?.headersFromEnv).toEqual({ "CF-Access-Client-Id": "ACCESS_CLIENT_ID" });
  });

  it("null in a PATCH takes a setting out (RFC 7396): an optional one is then unset, one with a default back at it", async () => {
    const access = { "CF-Access-Client-Id": "ACCESS_CLIENT_ID" };
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-null", totalTimeoutMs: 9000, pricing: { promptUsdPerMillion: 1, completionUsdPerMillion: 2 }, deployments: [{ ...sim(0, "n"), maxInFlight: 3, headersFromEnv: access }] } }), 201);
    const settings = () => ok<Record<string, unknown>>(admin("/admin/v1/groups/admin-null"));
    // Within a nested setting too, where the field is one it can be without; pricing's prices it cannot.
    expect(await refused(admin("/admin/v1/groups/admin-null", { method: "PATCH", json: { pricing: { promptUsdPerMillion: null } } }), 400)).toMatchObject({ param: "pricing.promptUsdPerMillion" });
    await ok(admin("/admin/v1/groups/admin-null", { method: "PATCH", json: { totalTimeoutMs: null, pricing: null } }));
    const g = await settings();
    expect(g).not.toHaveProperty("totalTimeoutMs");
    expect(g).not.toHaveProperty("pricing");
    await ok(admin("/admin/v1/groups/admin-null/deployments/n", { method: "PATCH", json: { headersFromEnv: null, maxInFlight: null } }));
    const exported = await ok<{ modelGroups: { name: string; deployments: Record<string, unknown>[] }[] }>(admin("/admin/v1/fleet"));
    const d = exported.modelGroups.find((x) => x.name === "admin-null")?.deployments[0];
    expect(d).not.toHaveProperty("headersFromEnv");
    expect(d?.maxInFlight).toBe(256);
    // A misspelled field taken out is refused as unknown, not taken as a change of nothing.
    expect(await refused(admin("/admin/v1/groups/admin-null", { method: "PATCH", json: { totalTimeoutMS: null } }), 400)).toMatchObject({ message: expect.stringMatching(/unknown key totalTimeoutMS \(did you mean totalTimeoutMs\?\)/) as string });
    expect(await refused(admin("/admin/v1/groups/admin-null", { method: "PATCH", json: { failover: { maxAttemps: null } } }), 400)).toMatchObject({ param: "failover" });
    expect(await refused(admin("/admin/v1/groups/admin-null/deployments/n", { method: "PATCH", json: { apikeyEnv: null } }), 400)).toMatchObject({ message: expect.stringMatching(/unknown key apikeyEnv \(did you mean apiKeyEnv\?\)/) as string });
    // A field the deployment cannot be without is still required.
    expect(await refused(admin("/admin/v1/groups/admin-null/deployments/n", { method: "PATCH", json: { baseUrl: null } }), 400)).toMatchObject({ param: "baseUrl" });
  });

  it("a group that would not fit one storage row is refused, and nothing of it is applied", async () => {
    // Eight deployments each with a 160 KB base URL: a 1.3 MB group, within the admin API's 4 MiB body.
    const long = (i: number) => ({ ...sim(0, `long-${i}`), baseUrl: `${fleet[0]}/${"p".repeat(160 * 1024)}` });
    const rev = await fleetRev();
    const refusal = await refused(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-huge", deployments: Array.from({ length: 8 }, (_, i) => long(i)) } }), 400);
    expect(refusal).toMatchObject({ code: "group_too_large", param: "deployments" });
    expect(refusal.message).toMatch(/group "admin-huge" would be \d+ bytes as stored, over the 1048576/);
    // Grown one deployment at a time, the same.
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-huge", deployments: [] } }), 201);
    for (let i = 0; i < 6; i++) await ok(admin("/admin/v1/groups/admin-huge/deployments", { method: "POST", json: long(i) }), 201);
    expect(await refused(admin("/admin/v1/groups/admin-huge/deployments", { method: "POST", json: long(6) }), 400)).toMatchObject({ code: "group_too_large", param: null });
    expect(await fleetRev()).toBe(rev + 7);
  });

  it("a group of more than 1,024 deployments is a 400 too_many_deployments whichever way it would grow, and nothing of it is applied", async () => {
    const many = (n: number) => Array.from({ length: n }, (_, i) => sim(0, `d${i}`));
    const rev = await fleetRev();
    // Listed whole: a new group, or a group of a fleet PUT.
    expect(await refused(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-many", deployments: many(1025) } }), 400)).toMatchObject({ code: "too_many_deployments", param: "deployments" });
    expect(await refused(admin("/admin/v1/fleet", { method: "PUT", json: { modelGroups: [{ name: "admin-many", deployments: many(1025) }] } }), 400)).toMatchObject({ code: "too_many_deployments", param: "modelGroups[0].deployments" });
    expect(await fleetRev()).toBe(rev);
    // Full, one more: added by the operator, or a server registering itself.
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-many", deployments: many(1024) } }), 201);
    // A body of one deployment has no deployments field to name.
    expect(await refused(admin("/admin/v1/groups/admin-many/deployments", { method: "POST", json: sim(0, "one-more") }), 400)).toMatchObject({ code: "too_many_deployments", param: null });
    expect(await refused(admin("/admin/v1/heartbeats", { method: "POST", json: { group: "admin-many", ...sim(0, "one-more") } }, env.KVGATE_REGISTER_KEY), 400)).toMatchObject({ code: "too_many_deployments", param: null });
    expect(await fleetRev()).toBe(rev + 1);
  });

  it("bad input gets an OpenAI-style 4xx, and nothing of it is applied", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-strict", aliases: ["strict-alias"], deployments: [sim(0, "s")] } }), 201);
    const rev = await fleetRev();
    const post = (json: unknown) => admin("/admin/v1/groups/admin-strict/deployments", { method: "POST", json });
    expect(await refused(post({ ...sim(1, "t"), baseUrl: "ftp://x" }), 400)).toMatchObject({ param: "baseUrl", type: "invalid_request_error" });
    expect(await refused(post({ baseUrl: fleet[1], model: "m" }), 400)).toMatchObject({ param: "id" });
    expect(await refused(post({ ...sim(1, "t"), apiKey: "sk-live" }), 400)).toMatchObject({ message: expect.stringMatching(/unknown key/) });
    expect((await refused(post(sim(1, "s")), 409)).code).toBe("deployment_exists");
    // What a deployment needs of the runtime must be there: a binding, the secrets its headers come from.
    // Named by the field of the request, as any other refusal of its fields is.
    expect(await refused(post({ ...sim(1, "t"), binding: "NO_SUCH_VPC" }), 400)).toMatchObject({ param: "binding", message: expect.stringMatching(/^binding "NO_SUCH_VPC" is not a Workers VPC binding/) as string });
    expect(await refused(post({ ...sim(1, "t"), headersFromEnv: { "CF-Access-Client-Id": "NO_SUCH_SECRET" } }), 400)).toMatchObject({ param: "headersFromEnv.CF-Access-Client-Id", message: expect.stringMatching(/NO_SUCH_SECRET/) as string });
    expect(await refused(admin("/admin/v1/groups/admin-strict/deployments/s", { method: "PATCH", json: { binding: "NO_SUCH_VPC" } }), 400)).toMatchObject({ param: "binding" });
    expect((await refused(admin("/admin/v1/groups/admin-strict/deployments/s", { method: "PATCH", json: { weight: 0 } }), 400)).param).toBe("weight");
    expect((await refused(admin("/admin/v1/groups/admin-strict/deployments/s", { method: "PATCH", json: {} }), 400)).message).toMatch(/names no field/);
    expect((await refused(admin("/admin/v1/groups/admin-strict/deployments/nope/drain", { method: "POST" }), 404)).code).toBe("deployment_not_found");
    expect((await refused(admin("/admin/v1/groups/nope/deployments", { method: "POST", json: sim(1, "t") }), 404)).code).toBe("group_not_found");
    // A group whose alias another group has: the whole new group is refused.
    expect((await refused(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-clash", aliases: ["strict-alias"], deployments: [] } }), 409)).message).toMatch(/strict-alias/);
    const notJson = await admin("/admin/v1/groups", { method: "POST", body: "{", headers: { "content-type": "application/json" } });
    expect(notJson.status).toBe(400);
    await notJson.text();
    expect(await fleetRev()).toBe(rev);
    const list = await ok<DeploymentList>(admin("/admin/v1/groups/admin-strict/deployments"));
    expect(list.data.map((d) => [d.id, d.state, d.weight])).toEqual([["s", "active", 1]]);
  });

  it("a fleet rule a change breaks is a 409 when it clashes with what the fleet holds beside the request, a 400 when a value is bad or the request clashes with itself, whatever the names say, named by the request's field (found by review)", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-rules", deployments: [] } }), 201);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-rules-other", aliases: ["already-taken"], deployments: [] } }), 201);
    const rev = await fleetRev();
    const patch = (json: unknown) => admin("/admin/v1/groups/admin-rules", { method: "PATCH", json });
    // A fallback naming no group is a bad value, whatever its (valid) name holds.
    for (const name of ["no-such-group", "already-retired", "listed-twice"]) {
      const e = await refused(patch({ fallbacks: ["admin-rules-other", name] }), 400);
      expect(e, name).toMatchObject({ code: "invalid_fleet", param: "fallbacks[1]", message: `fallbacks[1] "${name}" names no group` });
    }
    // An alias another group has is a conflict, named in this request, though the fleet lists the other group after this one.
    const alias = await refused(patch({ aliases: ["fine", "already-taken"] }), 409);
    expect(alias).toMatchObject({ code: "invalid_fleet", param: "aliases[1]", message: 'aliases[1] "already-taken" is already the name or alias of another group' });
    expect(await refused(patch({ aliases: ["admin-rules-other"] }), 409)).toMatchObject({ param: "aliases[0]" });
    // A new group's, as its body has them.
    const post = (json: unknown) => admin("/admin/v1/groups", { method: "POST", json: { name: "admin-rules-new", deployments: [], ...(json as object) } });
    expect(await refused(post({ fallbacks: ["already-gone"] }), 400)).toMatchObject({ param: "fallbacks[0]" });
    expect(await refused(post({ aliases: ["admin-rules-other"] }), 409)).toMatchObject({ param: "aliases[0]" });
    // An id the body itself lists twice is a bad body, not a conflict with the fleet.
    expect(await refused(post({ deployments: [sim(0, "twice"), sim(1, "twice")] }), 400)).toMatchObject({ param: "deployments[1].id", message: 'deployments[1].id "twice" is used twice in the group (set distinct ids)' });
    // A fleet PUT holds the whole fleet: whatever it lists twice, it clashes only with itself.
    const put = (...modelGroups: unknown[]) => admin("/admin/v1/fleet", { method: "PUT", json: { modelGroups } });
    expect(await refused(put({ name: "admin-rules-p", deployments: [] }, { name: "admin-rules-p", deployments: [] }), 400)).toMatchObject({ code: "invalid_value", param: "modelGroups" });
    const aliased = await refused(put({ name: "admin-rules-p", deployments: [] }, { name: "admin-rules-q", aliases: ["admin-rules-p"], deployments: [] }), 400);
    expect(aliased).toMatchObject({ code: "invalid_fleet", param: "modelGroups[1].aliases[0]", message: 'modelGroups[1].aliases[0] "admin-rules-p" is already the name or alias of another group' });
    const ids = await refused(put({ name: "admin-rules-p", deployments: [sim(0, "x"), sim(1, "x")] }), 400);
    expect(ids).toMatchObject({ code: "invalid_fleet", param: "modelGroups[0].deployments[1].id", message: 'modelGroups[0].deployments[1].id "x" is used twice in the group (set distinct ids)' });
    expect(await fleetRev()).toBe(rev);
    // A removal breaking another group's fallback: no field of the request (a DELETE has none), that group named.
    await ok(patch({ fallbacks: ["admin-rules-other"] }));
    const removal = await refused(admin("/admin/v1/groups/admin-rules-other", { method: "DELETE" }), 400);
    expect(removal).toMatchObject({ code: "invalid_fleet", param: null, message: 'group "admin-rules": fallbacks[0] "admin-rules-other" names no group' });
  });

  it("a name a group lists twice, an alias twice or its own name as an alias, is a 400 naming the alias whichever way it comes, and /v1/models lists each name once (found by review)", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-twice", aliases: ["twice-a"], deployments: [sim(0, "x")] } }), 201);
    const rev = await fleetRev();
    const post = (aliases: string[]) => admin("/admin/v1/groups", { method: "POST", json: { name: "admin-twice-new", aliases, deployments: [sim(0, "x")] } });
    expect(await refused(post(["twice-b", "twice-b"]), 400)).toMatchObject({ code: "invalid_fleet", param: "aliases[1]", message: 'aliases[1] "twice-b" is listed twice in the group' });
    expect(await refused(post(["twice-b", "admin-twice-new"]), 400)).toMatchObject({ code: "invalid_fleet", param: "aliases[1]", message: 'aliases[1] "admin-twice-new" is the group\'s own name' });
    const patch = (aliases: string[]) => admin("/admin/v1/groups/admin-twice", { method: "PATCH", json: { aliases } });
    expect(await refused(patch(["twice-a", "twice-a"]), 400)).toMatchObject({ param: "aliases[1]" });
    expect(await refused(patch(["admin-twice"]), 400)).toMatchObject({ param: "aliases[0]" });
    const exported = await ok<{ modelGroups: { name: string; aliases: string[] }[] }>(admin("/admin/v1/fleet"));
    const gi = exported.modelGroups.findIndex((g) => g.name === "admin-twice");
    exported.modelGroups[gi]?.aliases.push("twice-a");
    expect(await refused(admin("/admin/v1/fleet", { method: "PUT", json: exported }), 400)).toMatchObject({ param: `modelGroups[${gi}].aliases[1]` });
    expect(await fleetRev()).toBe(rev);
    const models = await ok<{ data: { id: string }[] }>(gateway("/v1/models"));
    expect(models.data.map((m) => m.id).filter((id) => id.includes("twice"))).toEqual(["admin-twice", "twice-a"]);
  });

  it("a deployment naming one of the gateway's own keys is refused, naming the field, and nothing of it is applied", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-keys", deployments: [sim(0, "k")] } }), 201);
    const rev = await fleetRev();
    const post = await refused(admin("/admin/v1/groups/admin-keys/deployments", { method: "POST", json: { ...sim(1, "leak"), apiKeyEnv: "KVGATE_ADMIN_KEY" } }), 400);
    expect(post).toMatchObject({ type: "invalid_request_error", code: "gateway_key_named", param: "apiKeyEnv" });
    expect(post.message).toMatch(/^apiKeyEnv names KVGATE_ADMIN_KEY, the gateway's own key \(auth\.adminKeyEnv\)/);
    expect(JSON.stringify(post)).not.toContain(env.KVGATE_ADMIN_KEY);
    const patch = await refused(admin("/admin/v1/groups/admin-keys/deployments/k", { method: "PATCH", json: { headersFromEnv: { "x-k": "KVGATE_REGISTER_KEY" } } }), 400);
    expect(patch).toMatchObject({ code: "gateway_key_named", param: "headersFromEnv.x-k" });
    const group = await refused(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-keys-2", deployments: [{ ...sim(1, "leak"), apiKeyEnv: "KVGATE_MASTER_KEY" }] } }), 400);
    expect(group).toMatchObject({ code: "gateway_key_named", param: "deployments[0].apiKeyEnv" });
    // What a new group's deployment lacks of the runtime is named by its place in the request too.
    const unbound = await refused(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-keys-3", deployments: [sim(1, "a"), { ...sim(1, "b"), binding: "NO_SUCH_VPC" }] } }), 400);
    expect(unbound).toMatchObject({ param: "deployments[1].binding", message: expect.stringMatching(/^deployments\[1\]\.binding "NO_SUCH_VPC" is not a Workers VPC binding/) as string });
    expect(await fleetRev()).toBe(rev);
    expect((await row("admin-keys", "k")).url).toBe(fleet[0]);
  });

  it("a group removed answers 404 to its model; its name is free again", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-gone", deployments: [sim(2, "x")] } }), 201);
    expect(await servedBy("admin-gone", 1)).toEqual(["x"]);
    await ok(admin("/admin/v1/groups/admin-gone", { method: "DELETE" }));
    await vi.waitFor(async () => {
      const res = await chat("admin-gone", [{ role: "user", content: "hi" }]);
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
    }, EVENTUALLY);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-gone", deployments: [sim(3, "y")] } }), 201);
    await vi.waitFor(async () => expect(await servedBy("admin-gone", 1)).toEqual(["y"]), EVENTUALLY);
  });
});

describe("two operators changing the same group", () => {
  type Group = Record<string, unknown> & { rev: number; aliases: string[] };
  const group = (name: string) => ok<Group>(admin(`/admin/v1/groups/${name}`));

  it("each sends back the rev it read: the second PATCH of a group is refused, not a silent overwrite of the first", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-race", aliases: ["race-a"], failover: { on: ["5xx"] }, deployments: [sim(0, "r")] } }), 201);
    // Both read the group, then each adds an alias to the list it read: a PATCH replaces a list whole.
    const [first, second] = await Promise.all([group("admin-race"), group("admin-race")]);
    expect(second.rev).toBe(first.rev);
    await ok(admin("/admin/v1/groups/admin-race", { method: "PATCH", json: { aliases: [...first.aliases, "race-b"], rev: first.rev } }));
    const stale = await refused(admin("/admin/v1/groups/admin-race", { method: "PATCH", json: { aliases: [...second.aliases, "race-c"], rev: second.rev } }), 409);
    expect(stale).toMatchObject({ type: "invalid_request_error", code: "group_changed", param: "rev" });
    expect(stale.message).toMatch(new RegExp(`^group "admin-race" changed since revision ${second.rev} \\(it is at \\d+\\)`));
    expect((await group("admin-race")).aliases).toEqual(["race-a", "race-b"]);
    // Read again, the second operator's change is made on top of the first's.
    const fresh = await group("admin-race");
    await ok(admin("/admin/v1/groups/admin-race", { method: "PATCH", json: { aliases: [...fresh.aliases, "race-c"], rev: fresh.rev } }));
    expect((await group("admin-race")).aliases).toEqual(["race-a", "race-b", "race-c"]);
    // Without a rev, a PATCH applies whatever the group is at, as it always did.
    await ok(admin("/admin/v1/groups/admin-race", { method: "PATCH", json: { failover: { on: ["connect"] } } }));
    expect((await group("admin-race")).failover).toMatchObject({ on: ["connect"] });
  });

  it("a deployment's PATCH and DELETE, and a group's DELETE, carrying the group's rev read before another change, are refused and change nothing", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-race-d", deployments: [sim(0, "x"), sim(1, "y")] } }), 201);
    const read = await ok<DeploymentRow & { rev: number }>(admin("/admin/v1/groups/admin-race-d/deployments/x"));
    expect(read.rev).toBe((await group("admin-race-d")).rev);
    expect((await ok<DeploymentList>(admin("/admin/v1/groups/admin-race-d/deployments"))).rev).toBe(read.rev);
    await ok(admin("/admin/v1/groups/admin-race-d/deployments/x", { method: "PATCH", json: { weight: 3, rev: read.rev } }));
    const rev = await fleetRev();
    const patch = await refused(admin("/admin/v1/groups/admin-race-d/deployments/x", { method: "PATCH", json: { weight: 5, rev: read.rev } }), 409);
    expect(patch).toMatchObject({ code: "group_changed", param: "rev" });
    expect((await refused(admin(`/admin/v1/groups/admin-race-d/deployments/y?rev=${read.rev}`, { method: "DELETE" }), 409)).code).toBe("group_changed");
    expect((await refused(admin(`/admin/v1/groups/admin-race-d?rev=${read.rev}`, { method: "DELETE" }), 409)).code).toBe("group_changed");
    expect(await fleetRev()).toBe(rev);
    expect((await ok<DeploymentList>(admin("/admin/v1/groups/admin-race-d/deployments"))).data.map((d) => [d.id, d.weight])).toEqual([["x", 3], ["y", 1]]);
    // A revision that is no revision is a 400 naming it; the current one is taken.
    for (const bad of ["seven", "-1", "1.5", ""]) {
      expect(await refused(admin(`/admin/v1/groups/admin-race-d/deployments/y?rev=${bad}`, { method: "DELETE" }), 400)).toMatchObject({ code: "invalid_value", param: "rev" });
    }
    expect(await refused(admin("/admin/v1/groups/admin-race-d", { method: "PATCH", json: { strategy: "round-robin", rev: "7" } }), 400)).toMatchObject({ code: "invalid_value", param: "rev" });
    const now = (await group("admin-race-d")).rev;
    await ok(admin(`/admin/v1/groups/admin-race-d/deployments/y?rev=${now}`, { method: "DELETE" }));
    const after = (await group("admin-race-d")).rev;
    await ok(admin(`/admin/v1/groups/admin-race-d?rev=${after}`, { method: "DELETE" }));
    await refused(admin("/admin/v1/groups/admin-race-d"), 404);
  });

  it("a change answers the group's rev, one that changed nothing too: a script carrying it into its next PATCH is not refused for a change it did not miss (found by review)", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-noop", deployments: [sim(0, "x")] } }), 201);
    // Another group's change since: the fleet's revision is past this group's.
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-noop-other", deployments: [] } }), 201);
    const at = (await group("admin-noop")).rev;
    expect(await fleetRev()).toBeGreaterThan(at);
    const unchanged: [string, string, unknown][] = [
      ["POST", "/admin/v1/groups/admin-noop/deployments/x/enable", undefined],
      ["PATCH", "/admin/v1/groups/admin-noop/deployments/x", { weight: 1 }],
      ["PATCH", "/admin/v1/groups/admin-noop", { aliases: [] }],
    ];
    for (const [method, path, json] of unchanged) {
      const r = await ok<{ rev: number; changed: string[] }>(admin(path, { method, ...(json === undefined ? {} : { json }) }));
      expect(r, `${method} ${path}`).toMatchObject({ rev: at, changed: [] });
    }
    // A change that changed the group answers the revision the group is then at; sent again, the same.
    const drained = await ok<{ rev: number; changed: string[] }>(admin("/admin/v1/groups/admin-noop/deployments/x/drain", { method: "POST" }));
    expect(drained).toMatchObject({ changed: ["admin-noop"], rev: (await group("admin-noop")).rev });
    await ok(admin("/admin/v1/groups/admin-noop-other", { method: "PATCH", json: { aliases: ["noop-b"] } }));
    expect(await ok(admin("/admin/v1/groups/admin-noop/deployments/x/drain", { method: "POST" }))).toMatchObject({ rev: drained.rev, changed: [] });
    await ok(admin("/admin/v1/groups/admin-noop", { method: "PATCH", json: { aliases: ["noop-a"], rev: drained.rev } }));
    expect((await group("admin-noop")).aliases).toEqual(["noop-a"]);
  });
});

describe("a revision sent under another name", () => {
  it("is a 400 naming the field or query parameter, not a change made without the revision check: PUT /fleet's body and a DELETE's query take only their own", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-misnamed", deployments: [sim(0, "x"), sim(1, "y")] } }), 201);
    const stale = await fleetRev();
    await ok(admin("/admin/v1/groups/admin-misnamed/deployments/x", { method: "PATCH", json: { weight: 2 } }));
    const rev = await fleetRev();
    const exported = await ok<{ modelGroups: { name: string }[] }>(admin("/admin/v1/fleet"));
    // Read before the PATCH, this fleet without the group would be refused with a 409 had its revision been named `rev`.
    const without = exported.modelGroups.filter((g) => g.name !== "admin-misnamed");
    expect(await refused(admin("/admin/v1/fleet", { method: "PUT", json: { modelGroups: without, rev: stale } }), 409)).toMatchObject({ code: "fleet_changed", param: "rev" });
    const put = await refused(admin("/admin/v1/fleet", { method: "PUT", json: { modelGroups: without, revision: stale } }), 400);
    expect(put).toMatchObject({ type: "invalid_request_error", code: "invalid_value", param: "revision", message: 'unknown field "revision"; PUT /admin/v1/fleet takes modelGroups, rev' });
    for (const path of [`/admin/v1/groups/admin-misnamed/deployments/y?revision=${stale}`, `/admin/v1/groups/admin-misnamed?revision=${stale}`, `/admin/v1/groups/admin-misnamed?rev=${rev}&force=1`]) {
      const param = path.includes("force") ? "force" : "revision";
      expect(await refused(admin(path, { method: "DELETE" }), 400), path).toMatchObject({ code: "invalid_value", param, message: expect.stringMatching(new RegExp(`^unknown query parameter "${param}"; a DELETE takes rev$`)) as string });
    }
    expect(await fleetRev()).toBe(rev);
    expect((await ok<DeploymentList>(admin("/admin/v1/groups/admin-misnamed/deployments"))).data.map((d) => d.id)).toEqual(["x", "y"]);
    await ok(admin(`/admin/v1/groups/admin-misnamed?rev=${rev}`, { method: "DELETE" }));
  });

  it("is a 400 naming the query parameter on a PATCH, PUT or POST, which take none: a stale ?rev= there made the change over another operator's", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-query-rev", aliases: ["qr-a"], deployments: [sim(0, "x")] } }), 201);
    const stale = (await ok<{ rev: number }>(admin("/admin/v1/groups/admin-query-rev"))).rev;
    // Another operator's change since: the revision read above is stale.
    await ok(admin("/admin/v1/groups/admin-query-rev", { method: "PATCH", json: { aliases: ["qr-b"] } }));
    const rev = await fleetRev();
    const exported = await ok<{ modelGroups: { name: string }[]; rev: number }>(admin("/admin/v1/fleet"));
    const key = await ok<{ id: string; prefix: string }>(admin("/admin/v1/keys", { method: "POST", json: { name: "query-rev" } }), 201);
    const changes: [string, string, unknown][] = [
      ["PATCH", `/admin/v1/groups/admin-query-rev?rev=${stale}`, { aliases: ["qr-c"] }],
      ["PATCH", `/admin/v1/groups/admin-query-rev/deployments/x?rev=${stale}`, { weight: 3 }],
      ["PUT", `/admin/v1/fleet?rev=${stale}`, { modelGroups: exported.modelGroups.filter((g) => g.name !== "admin-query-rev") }],
      ["POST", `/admin/v1/groups?rev=${stale}`, { name: "admin-query-rev-2", deployments: [sim(0, "y")] }],
      ["POST", `/admin/v1/groups/admin-query-rev/deployments?rev=${stale}`, sim(1, "z")],
      ["POST", `/admin/v1/groups/admin-query-rev/deployments/x/drain?rev=${stale}`, undefined],
      ["POST", "/admin/v1/keys?force=1", { name: "query-rev-2" }],
      ["PATCH", `/admin/v1/keys/${key.id}?rev=1`, { rpm: 5 }],
      ["POST", `/admin/v1/keys/${key.id}/revoke?force=1`, undefined],
      ["POST", `/admin/v1/keys/${key.id}/rotate?force=1`, undefined],
    ];
    for (const [method, path, json] of changes) {
      const param = new URL(path, "http://x").searchParams.keys().next().value;
      const e = await refused(admin(path, { method, ...(json === undefined ? {} : { json }) }), 400);
      expect(e, `${method} ${path}`).toMatchObject({ type: "invalid_request_error", code: "invalid_value", param, message: expect.stringContaining(`unknown query parameter "${param}"`) as string });
    }
    // None of them was made.
    expect(await fleetRev()).toBe(rev);
    expect(await ok(admin("/admin/v1/groups/admin-query-rev"))).toMatchObject({ aliases: ["qr-b"], deployments: [{ id: "x", weight: 1, state: "active" }] });
    expect(await ok(admin(`/admin/v1/keys/${key.id}`))).toMatchObject({ rpm: null, status: "active", prefix: key.prefix });
    const names = await keyNames();
    expect(names).toContain("query-rev");
    expect(names).not.toContain("query-rev-2");
    await ok(admin(`/admin/v1/groups/admin-query-rev?rev=${rev}`, { method: "DELETE" }));
  });

  it("is a 400 naming the field in the body of a DELETE, a drain, an enable or a disable, which read none: a DELETE carrying a stale rev there, as a PATCH does, deleted over another operator's change (found by review)", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-body-rev", deployments: [sim(0, "x"), sim(1, "y")] } }), 201);
    const stale = (await ok<{ rev: number }>(admin("/admin/v1/groups/admin-body-rev"))).rev;
    // Another operator's change since: the revision read above is stale.
    await ok(admin("/admin/v1/groups/admin-body-rev/deployments/x", { method: "PATCH", json: { weight: 2 } }));
    const rev = await fleetRev();
    for (const path of ["/admin/v1/groups/admin-body-rev/deployments/y", "/admin/v1/groups/admin-body-rev"]) {
      const e = await refused(admin(path, { method: "DELETE", json: { rev: stale } }), 400);
      expect(e, path).toMatchObject({ type: "invalid_request_error", code: "invalid_value", param: "rev", message: 'unknown field "rev"; a DELETE takes no body: its revision goes in its query, ?rev=N' });
    }
    for (const verb of ["drain", "enable", "disable"]) {
      const e = await refused(admin(`/admin/v1/groups/admin-body-rev/deployments/y/${verb}`, { method: "POST", json: { rev: stale } }), 400);
      expect(e, verb).toMatchObject({ code: "invalid_value", param: "rev", message: expect.stringMatching(/^unknown field "rev"; a drain, enable or disable takes no body/) as string });
    }
    // Anything else a body carries is refused as well, a body that is no object too: none of it would be read.
    expect(await refused(admin("/admin/v1/groups/admin-body-rev", { method: "DELETE", json: { force: true } }), 400)).toMatchObject({ param: "force" });
    expect(await refused(admin("/admin/v1/groups/admin-body-rev", { method: "DELETE", json: [stale] }), 400)).toMatchObject({ param: null, message: expect.stringMatching(/^a DELETE takes no body/) as string });
    // None of them was made.
    expect(await fleetRev()).toBe(rev);
    expect(await ok(admin("/admin/v1/groups/admin-body-rev"))).toMatchObject({ deployments: [{ id: "x", weight: 2, state: "active" }, { id: "y", state: "active" }] });
    // A body that carries nothing is none: an empty one, blank, or {}.
    await ok(admin("/admin/v1/groups/admin-body-rev/deployments/y/drain", { method: "POST", body: "" }));
    await ok(admin("/admin/v1/groups/admin-body-rev/deployments/y/enable", { method: "POST", json: {} }));
    await ok(admin("/admin/v1/groups/admin-body-rev/deployments/y", { method: "DELETE", body: " \n" }));
    const now = (await ok<{ rev: number }>(admin("/admin/v1/groups/admin-body-rev"))).rev;
    await ok(admin(`/admin/v1/groups/admin-body-rev?rev=${now}`, { method: "DELETE", json: {} }));
    await refused(admin("/admin/v1/groups/admin-body-rev"), 404);
  });
});

describe("heartbeats", () => {
  it("a server registers with the register key and renews; past its TTL it drains, a TTL later it is gone", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb", strategy: "round-robin", deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb", ...sim(1, "hb"), ttlSeconds: 1 };
    const first = await ok<{ changed: string[] }>(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    expect(first.changed).toEqual(["admin-hb"]);
    expect(await row("admin-hb", "hb")).toMatchObject({ source: "heartbeat", state: "active", takesRequests: true });
    await vi.waitFor(async () => expect(await servedBy("admin-hb", 4)).toContain("hb"), EVENTUALLY);
    // A renewal that changes nothing routing sees moves the expiry only.
    const renewed = await ok<{ changed: string[] }>(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    expect(renewed.changed).toEqual([]);
    // Heartbeats renew only servers that registered themselves.
    expect((await refused(admin("/admin/v1/heartbeats", { method: "POST", json: { ...beat, id: "fixed" } }, env.KVGATE_REGISTER_KEY), 409)).code).toBe("deployment_exists");
    await vi.waitFor(async () => expect(await row("admin-hb", "hb")).toMatchObject({ state: "draining", takesRequests: false }), { timeout: 5000, interval: 100 });
    expect(await servedBy("admin-hb", 4)).toEqual(Array(4).fill("fixed"));
    await vi.waitFor(async () => expect((await admin("/admin/v1/groups/admin-hb/deployments/hb")).status).toBe(404), { timeout: 5000, interval: 100 });
  });

  it("names no secret the config does not list for heartbeats, and none of the gateway's own keys", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb-secrets", deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb-secrets", ...sim(1, "hb") };
    const post = (json: unknown, key = env.KVGATE_REGISTER_KEY) => admin("/admin/v1/heartbeats", { method: "POST", json }, key);
    expect(await refused(post({ ...beat, apiKeyEnv: "KVGATE_ADMIN_KEY" }), 400)).toMatchObject({ code: "gateway_key_named", param: "apiKeyEnv" });
    // Any other value of the Worker's env, the config itself included, unless listed.
    expect(await refused(post({ ...beat, headersFromEnv: { "x-c": "KVGATE_CONFIG" } }), 403)).toMatchObject({ type: "permission_error", code: "secret_not_allowed", param: "headersFromEnv.x-c" });
    // The admin key posts the same heartbeat, with the same limits.
    await refused(post({ ...beat, apiKeyEnv: "KVGATE_CONFIG" }, env.KVGATE_ADMIN_KEY), 403);
    await refused(admin("/admin/v1/groups/admin-hb-secrets/deployments/hb"), 404);
  });

  it("into a group closed to registration is a 403 before anything else it says is looked at; open, the group refuses each as ever", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb-closed", registration: false, deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb-closed", ...sim(1, "hb") };
    const post = (json: unknown, key = env.KVGATE_REGISTER_KEY) => admin("/admin/v1/heartbeats", { method: "POST", json }, key);
    const bad = [{ ...beat, id: ".." }, { ...beat, ttlSeconds: 0 }, { ...beat, baseURL: fleet[1] }, { group: beat.group }, { ...beat, binding: "NO_SUCH_VPC" }, { ...beat, apiKeyEnv: "KVGATE_CONFIG" }, { ...beat, apiKeyEnv: "KVGATE_ADMIN_KEY" }];
    const closed = { type: "permission_error", code: "registration_not_allowed", param: "group" };
    for (const json of [beat, ...bad]) expect(await refused(post(json), 403), JSON.stringify(json)).toMatchObject(closed);
    expect(await refused(post(bad[0], env.KVGATE_ADMIN_KEY), 403)).toMatchObject(closed);
    await ok(admin("/admin/v1/groups/admin-hb-closed", { method: "PATCH", json: { registration: true } }));
    const open = await Promise.all(bad.map(async (json) => (await post(json)).json()));
    expect(open.map((e) => (e as { error: { code: string; param: string | null } }).error)).toMatchObject([
      { code: "invalid_value", param: "id" },
      { code: "invalid_value", param: "ttlSeconds" },
      { code: "invalid_value", param: null },
      { code: "invalid_value", param: "id" },
      { code: "binding_not_allowed", param: "binding" },
      { code: "secret_not_allowed", param: "apiKeyEnv" },
      { code: "gateway_key_named", param: "apiKeyEnv" },
    ]);
  });

  it("a PATCH of a self-registered server is refused: its next heartbeat would put its own spec back", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb-patch", deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb-patch", ...sim(1, "hb") };
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    const patch = refused(admin("/admin/v1/groups/admin-hb-patch/deployments/hb", { method: "PATCH", json: { weight: 5 } }), 409);
    expect(await patch).toMatchObject({ code: "deployment_registered", param: "id" });
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    expect(await row("admin-hb-patch", "hb")).toMatchObject({ source: "heartbeat", weight: 1 });
  });

  it("a DELETE of a self-registered server lasts until its next heartbeat, which registers it again; a disable holds", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb-delete", deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb-delete", ...sim(1, "hb") };
    const post = () => ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    await post();
    await ok(admin("/admin/v1/groups/admin-hb-delete/deployments/hb", { method: "DELETE" }));
    await refused(admin("/admin/v1/groups/admin-hb-delete/deployments/hb"), 404);
    await post();
    expect(await row("admin-hb-delete", "hb")).toMatchObject({ state: "active", source: "heartbeat", takesRequests: true });
    await ok(admin("/admin/v1/groups/admin-hb-delete/deployments/hb/disable", { method: "POST" }));
    await post();
    expect(await row("admin-hb-delete", "hb")).toMatchObject({ state: "disabled", takesRequests: false });
  });

  it("an operator's drain holds through the server's next heartbeats, and an enable ends it", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb-drain", strategy: "round-robin", deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb-drain", ...sim(1, "hb") };
    const post = () => ok<{ changed: string[] }>(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    await post();
    await ok(admin("/admin/v1/groups/admin-hb-drain/deployments/hb/drain", { method: "POST" }));
    await post();
    expect(await row("admin-hb-drain", "hb")).toMatchObject({ state: "draining", takesRequests: false, drained: true });
    expect(await servedBy("admin-hb-drain", 4)).toEqual(Array(4).fill("fixed"));
    await ok(admin("/admin/v1/groups/admin-hb-drain/deployments/hb/enable", { method: "POST" }));
    await post();
    expect(await row("admin-hb-drain", "hb")).toMatchObject({ state: "active", takesRequests: true });
  });

  // An enable of a lapsed server left it active with no TTL: a server that never came back took requests at a dead address for good.
  it("an operator's enable of a server whose TTL ran out gives it one TTL from then: renewed by its heartbeats, or lapsed and gone without them", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb-enable", strategy: "round-robin", deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb-enable", ...sim(1, "hb"), ttlSeconds: 2 };
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    await vi.waitFor(async () => expect(await row("admin-hb-enable", "hb")).toMatchObject({ state: "draining", takesRequests: false }), { timeout: 8000, interval: 100 });
    const enabledAt = Date.now();
    await ok(admin("/admin/v1/groups/admin-hb-enable/deployments/hb/enable", { method: "POST" }));
    const enabled = await row("admin-hb-enable", "hb");
    expect(enabled).toMatchObject({ state: "active", source: "heartbeat", removeAt: null });
    expect(Date.parse(enabled.expiresAt ?? "")).toBeGreaterThan(enabledAt);
    // Its heartbeats back, its TTL runs on from each.
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    expect(await row("admin-hb-enable", "hb")).toMatchObject({ state: "active", takesRequests: true });
    // Without them, it drains at that TTL and goes a TTL later.
    await vi.waitFor(async () => expect(await row("admin-hb-enable", "hb")).toMatchObject({ state: "draining", takesRequests: false }), { timeout: 8000, interval: 100 });
    await vi.waitFor(async () => expect((await refused(admin("/admin/v1/groups/admin-hb-enable/deployments/hb"), 404)).code).toBe("deployment_not_found"), { timeout: 8000, interval: 100 });
  });

  it("an operator's disable outlasts a pause in the server's heartbeats: its row stays, lapsed, and its next heartbeat leaves it disabled", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-hb-pause", strategy: "round-robin", deployments: [sim(0, "fixed")] } }), 201);
    const beat = { group: "admin-hb-pause", ...sim(1, "hb"), ttlSeconds: 1 };
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    await ok(admin("/admin/v1/groups/admin-hb-pause/deployments/hb/disable", { method: "POST" }));
    // Past the second TTL that removes a lapsed server: a witness, enabled, its 1 s TTL begun after
    // hb's last heartbeat, is gone once the registry's expiry has run past it, and so past hb's.
    // (A fixed sleep could end before a late alarm ran, and the row was then there with or without the fix.)
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: { group: "admin-hb-pause", ...sim(2, "witness"), ttlSeconds: 1 } }, env.KVGATE_REGISTER_KEY));
    await vi.waitFor(async () => expect((await refused(admin("/admin/v1/groups/admin-hb-pause/deployments/witness"), 404)).code).toBe("deployment_not_found"), { timeout: 8000, interval: 100 });
    const lapsed = await row("admin-hb-pause", "hb");
    expect(lapsed).toMatchObject({ state: "disabled", takesRequests: false, source: "heartbeat", removeAt: null });
    // Its lapse is there to see: the expiry its last heartbeat set, passed.
    expect(Date.parse(lapsed.expiresAt ?? "")).toBeLessThan(Date.now());
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    expect(await row("admin-hb-pause", "hb")).toMatchObject({ state: "disabled", takesRequests: false });
    expect(await servedBy("admin-hb-pause", 4)).toEqual(Array(4).fill("fixed"));
  });

  it("fleet export then apply (GET then PUT /admin/v1/fleet) changes nothing: a drain holds, a registered server stays registered and renews", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "admin-roundtrip", strategy: "round-robin", deployments: [sim(0, "fixed"), sim(2, "spare")] } }), 201);
    const beat = { group: "admin-roundtrip", ...sim(1, "hb"), ttlSeconds: 60 };
    await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    await ok(admin("/admin/v1/groups/admin-roundtrip/deployments/spare/drain", { method: "POST" }));
    const before = await row("admin-roundtrip", "hb");
    // Every group and deployment as the registry holds it: who added it (the config, the admin API, a heartbeat) and its state.
    const records = async () => {
      const groups = await ok<GroupList>(admin("/admin/v1/groups"));
      const rows = await Promise.all(groups.data.map(async (g) => (await ok<DeploymentList>(admin(`/admin/v1/groups/${g.name}/deployments`))).data.map((d) => [g.name, g.source, d.id, d.source, d.state])));
      return { rev: groups.rev, rows: rows.flat() };
    };
    const held = await records();
    expect(held.rows.some(([, groupSource, , source]) => groupSource === "config" && source === "config")).toBe(true);
    const exported = await ok<{ modelGroups: unknown[] }>(admin("/admin/v1/fleet"));
    const put = await ok<{ rev: number; changed: string[] }>(admin("/admin/v1/fleet", { method: "PUT", json: { modelGroups: exported.modelGroups } }));
    expect(put).toMatchObject({ rev: held.rev, changed: [] });
    // The config's groups stay the config's: its next deploy still replaces them.
    expect(await records()).toEqual(held);
    expect(await row("admin-roundtrip", "spare")).toMatchObject({ state: "draining", takesRequests: false });
    expect(await row("admin-roundtrip", "hb")).toMatchObject({ source: "heartbeat", state: "active", expiresAt: before.expiresAt });
    const renewed = await ok<{ changed: string[] }>(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
    expect(renewed.changed).toEqual([]);
  });
});
