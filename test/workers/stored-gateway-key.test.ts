import { createExecutionContext, evictDurableObject, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { resolveDeployment, resolveGroup } from "../../src/config/resolve.ts";
import { DeploymentSchema, ModelGroupSchema } from "../../src/config/schema.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import type { GroupRecord } from "../../src/fleet/registry.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { admin, ok } from "./admin.ts";
import { EVENTUALLY, status } from "./gateway.ts";
import { tenants } from "./tenants.ts";
import { storeAsBefore, storedGroup } from "./stored-fleet.ts";

/**
 * A deployment the fleet registry stored before it refused the gateway's own keys (a heartbeat
 * with the register key could name KVGATE_ADMIN_KEY, and be sent it): the registry's SQLite is
 * written as such a heartbeat left it, and the registry is evicted so that it loads it again. And
 * the request path's own check, for such a deployment that reaches a Worker all the same. And a
 * self-registered server stored naming a secret the config no longer lists for heartbeats.
 */

const fleet = inject("upstreams").fleetUrls;

afterEach(() => {
  vi.restoreAllMocks();
});

/**
 * A group of one good server, and beside it in the registry's SQLite a self-registered server as
 * an older gateway stored it, naming `apiKeyEnv`; then the registry is evicted, so that it loads
 * the stored fleet again. What the console took from then on, and the registry.
 */
async function storedBeside(group: string, id: string, apiKeyEnv: string, ttlMs: number) {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, strategy: "round-robin", deployments: [{ id: "good", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } }), 201);
  const registry = env.FLEET.getByName(REGISTRY_NAME);
  await runInDurableObject(registry, (_o, state) => {
    const g = storedGroup(state.storage.sql, group);
    const spec = { ...(g.deployments[0] as GroupRecord["deployments"][number]).spec, id, baseUrl: fleet[1] as string, apiKeyEnv };
    g.deployments.push({ spec, state: "active", source: "heartbeat", expiresAt: Date.now() + 600_000, removeAt: null, ttlMs });
    storeAsBefore(state.storage.sql, g);
  });
  const logged = vi.spyOn(console, "log");
  await evictDurableObject(registry);
  return { registry, logged };
}

describe("a stored self-registered server that names a secret no longer listed", () => {
  it("lapses when the registry loads, without the field: it drains at once and goes a TTL later, instead of being sent the secret until then", async () => {
    // As a heartbeat left it while the config listed GPU_API_KEY for heartbeats (the test config lists only the Access token's names).
    const { registry, logged } = await storedBeside("stored-unlisted", "self", "GPU_API_KEY", 1_000);

    const { groups } = await registry.snapshot();
    const self = groups.find((g) => g.name === "stored-unlisted")?.deployments.find((d) => d.id === "self");
    expect(self).toMatchObject({ state: "draining" });
    expect(self?.apiKeyEnv).toBeUndefined();
    const lines = logged.mock.calls.map((c) => String(c[0]));
    const event = lines.flatMap((l) => (l.startsWith("{") ? [JSON.parse(l) as Record<string, unknown>] : [])).find((e) => e.event === "secret_not_allowed");
    expect(event).toMatchObject({ level: "warn", group: "stored-unlisted", deployment: "self", fields: ["apiKeyEnv"], secrets: ["GPU_API_KEY"], action: "lapsed" });
    for (const l of lines) expect(l).not.toContain(env.GPU_API_KEY);
    // Routing follows at once; the registry's alarm, set for a TTL later (1 s here), takes it out.
    await vi.waitFor(async () => expect((await status("stored-unlisted")).backends.find((b) => b.id === "self")?.takesRequests).toBe(false), EVENTUALLY);
    const due = await runInDurableObject(registry, (_o, state) => state.storage.getAlarm());
    expect(due).toBeGreaterThan(Date.now() - 5_000);
    expect(due).toBeLessThanOrEqual(Date.now() + 1_000);
    await vi.waitFor(async () => expect((await registry.snapshot()).groups.find((g) => g.name === "stored-unlisted")?.deployments.map((d) => d.id)).toEqual(["good"]), EVENTUALLY);
  });
});

describe("a stored deployment that names one of the gateway's keys", () => {
  it("is disabled when the registry loads, without the field, the change pushed to routing and logged by name, never by value", async () => {
    const { registry, logged } = await storedBeside("stored-key", "evil", "KVGATE_ADMIN_KEY", 600_000);

    const { rev, groups } = await registry.snapshot();
    const evil = groups.find((g) => g.name === "stored-key")?.deployments.find((d) => d.id === "evil");
    expect(evil).toMatchObject({ state: "disabled" });
    expect(evil?.apiKeyEnv).toBeUndefined();
    await vi.waitFor(async () => {
      const s = await status("stored-key");
      expect(s.rev).toBe(rev);
      expect(s.backends.find((b) => b.id === "evil")?.takesRequests).toBe(false);
    }, EVENTUALLY);
    const lines = logged.mock.calls.map((c) => String(c[0]));
    const event = lines.flatMap((l) => (l.startsWith("{") ? [JSON.parse(l) as Record<string, unknown>] : [])).find((e) => e.event === "gateway_key_named");
    expect(event).toMatchObject({ level: "warn", group: "stored-key", deployment: "evil", fields: ["apiKeyEnv"], secrets: ["KVGATE_ADMIN_KEY"] });
    for (const l of lines) expect(l).not.toContain(env.KVGATE_ADMIN_KEY);
    // The fleet holds again: a change checked against all of it is no longer refused for the stored deployment.
    await ok(admin("/admin/v1/groups/stored-key/deployments", { method: "POST", json: { id: "more", baseUrl: fleet[2], model: UPSTREAM_MODEL } }), 201);
  });

  it("is never sent the key by a Worker that still has it in its fleet: the request is refused before anything goes out", async () => {
    // A Worker's snapshot read before the registry disabled it (a registry stand-in hands it out,
    // as registry-outage.test.ts does: the real one no longer would, since the test above).
    const real = await env.FLEET.getByName(REGISTRY_NAME).snapshot();
    const { deployments: _, ...settings } = ModelGroupSchema.parse({ name: "stale-key", strategy: "round-robin", deployments: [] });
    const spec = DeploymentSchema.parse({ id: "evil", baseUrl: fleet[0], model: UPSTREAM_MODEL, apiKeyEnv: "KVGATE_ADMIN_KEY" });
    const stale = resolveGroup(settings, [resolveDeployment(spec, "active")], real.rev + 1);
    const registry: unknown = { getByName: () => ({ snapshot: async () => ({ rev: real.rev + 1, groups: [...real.groups, stale] }) }) };
    // Past the once-a-second bound on reading the fleet again for a model the isolate does not know.
    await new Promise((r) => setTimeout(r, 1100));
    const ctx = createExecutionContext();
    const req = new Request("https://kvgate.test/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "stale-key", messages: [{ role: "user", content: "hello" }], max_tokens: 2 }),
    });
    const res = await worker.fetch(req, { ...env, FLEET: registry } as Env, ctx);
    await waitOnExecutionContext(ctx);
    const body = await res.text();
    expect(res.status, body).toBe(500);
    expect(JSON.parse(body)).toMatchObject({ error: { code: "config_invalid", message: expect.stringContaining("apiKeyEnv names KVGATE_ADMIN_KEY, the gateway's own key") } });
    expect(body).not.toContain(env.KVGATE_ADMIN_KEY);
    expect((await status("stale-key")).backends[0]?.inFlight).toBe(0);

    // A virtual key's request is refused the same way, told only that a backend of the group is
    // misconfigured: which secret or binding it names is the owner's to see, in the log.
    const issued = await tenants().create({ name: "a tenant of stale-key" });
    if (!issued.ok) throw new Error(issued.message);
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const asTenant = createExecutionContext();
    const tenantReq = new Request("https://kvgate.test/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${issued.value.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "stale-key", messages: [{ role: "user", content: "hello" }], max_tokens: 2 }),
    });
    const tenantRes = await worker.fetch(tenantReq, { ...env, FLEET: registry } as Env, asTenant);
    await waitOnExecutionContext(asTenant);
    const said = await tenantRes.text();
    expect(tenantRes.status, said).toBe(500);
    expect(JSON.parse(said)).toMatchObject({ error: { code: "config_invalid", message: "gateway misconfigured: a backend of group stale-key cannot be reached as configured (the gateway's log says why)" } });
    for (const name of ["KVGATE_ADMIN_KEY", "apiKeyEnv", "evil"]) expect(said).not.toContain(name);
    const logged = errors.mock.calls.flat().map(String).join("\n");
    expect(logged).toContain("backend evil of group stale-key cannot be reached as configured: apiKeyEnv names KVGATE_ADMIN_KEY");
    expect(logged).not.toContain(env.KVGATE_ADMIN_KEY);
    expect((await status("stale-key")).backends[0]?.inFlight).toBe(0);
  });
});
