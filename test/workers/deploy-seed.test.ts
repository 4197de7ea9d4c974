import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { FleetRegistry } from "../../durable-objects/fleet-registry.ts";
import { parseConfig } from "../../src/config/load.ts";
import type { GroupRecord } from "../../src/fleet/registry.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { fnv1a64 } from "../../src/fnv64.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { chat, EVENTUALLY } from "./gateway.ts";

/**
 * Deploys that bring the same modelGroups, or none: what the operator did through the admin API
 * to the config's groups since the last deploy that changed them holds. The registry is restarted
 * as a deploy restarts it (evicted), its storage as the release before left it; a deploy of
 * another config is the registry's own class started on the same storage with that config.
 */

const fleet = inject("upstreams").fleetUrls;
const registry = () => env.FLEET.getByName(REGISTRY_NAME);
const config = JSON.parse(env.KVGATE_CONFIG) as Record<string, unknown>;

afterEach(() => {
  vi.restoreAllMocks();
});

const deploymentIds = async (group: string) => (await ok<{ data: { id: string }[] }>(admin(`/admin/v1/groups/${group}/deployments`))).data.map((d) => d.id);
const settings = (group: string) => ok<Record<string, unknown>>(admin(`/admin/v1/groups/${group}`));

function events(logged: { mock: { calls: unknown[][] } }): Record<string, unknown>[] {
  return logged.mock.calls.flatMap((c) => (String(c[0]).startsWith("{") ? [JSON.parse(String(c[0])) as Record<string, unknown>] : []));
}

/** The operator's changes to a config group: a server removed (`npx kvgate deployments remove`), a setting PATCHed. */
async function operatorChanges(group: string, removed: string): Promise<void> {
  await ok(admin(`/admin/v1/groups/${group}/deployments/${removed}`, { method: "DELETE" }));
  await ok(admin(`/admin/v1/groups/${group}`, { method: "PATCH", json: { hotThreshold: 5 } }));
}

/** Its answers come from the servers left, never the one removed. */
async function routesWithout(group: string, removed: string): Promise<void> {
  for (let i = 0; i < 6; i++) {
    await vi.waitFor(async () => {
      const res = await chat(group, [{ role: "user", content: `still there ${i}?` }]);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvgate-backend")).not.toBe(removed);
      await res.text();
    }, EVENTUALLY);
  }
}

describe("an upgrade that brings the same modelGroups", () => {
  it("from a release that hashed the groups with their defaults filled in: takes no seed again", async () => {
    await operatorChanges("skew", "sim-2");
    const { rev } = await ok<{ rev: number }>(admin("/admin/v1/status"));
    // What the release before stored: the hash of the groups as it filled them in (this release fills in the same).
    const parsed = parseConfig(env.KVGATE_CONFIG);
    if (!parsed.ok || parsed.config.seed === null) throw new Error("the test config has no modelGroups");
    const before = fnv1a64(JSON.stringify(parsed.config.seed.groups));
    await runInDurableObject(registry(), (_o, state) => void state.storage.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('seed', ?)", before));
    const logged = vi.spyOn(console, "log");
    await evictDurableObject(registry());

    expect(await deploymentIds("skew")).toEqual(["sim-0", "sim-1"]);
    expect(await settings("skew")).toMatchObject({ hotThreshold: 5 });
    expect((await ok<{ rev: number }>(admin("/admin/v1/status"))).rev).toBe(rev);
    expect(events(logged).filter((e) => e.event === "registry" || String(e.event).startsWith("seed_"))).toEqual([]);
    // Its new hash was stored: the next start takes nothing either.
    await evictDurableObject(registry());
    expect(await deploymentIds("skew")).toEqual(["sim-0", "sim-1"]);
    await routesWithout("skew", "sim-2");
  });

  it("of a release that adds settings with defaults: takes no seed again, and the stored groups get the defaults", async () => {
    await operatorChanges("durable", "sim-1");
    // As the release before stored them: without the settings this one added (streamKeepAliveMs, a deployment's schedulingPolicy).
    await runInDurableObject(registry(), (_o, state) => {
      const sql = state.storage.sql;
      const g = JSON.parse(sql.exec<{ record: string }>("SELECT record FROM groups WHERE name = 'durable'").one().record) as GroupRecord;
      const { streamKeepAliveMs: _, ...older } = g.settings;
      const deployments = g.deployments.map((d) => {
        const { schedulingPolicy: _p, ...spec } = d.spec;
        return { ...d, spec };
      });
      sql.exec("UPDATE groups SET record = ? WHERE name = 'durable'", JSON.stringify({ ...g, settings: older, deployments }));
    });
    await evictDurableObject(registry());

    const ids = await deploymentIds("durable");
    expect(ids).not.toContain("sim-1");
    expect(ids.length).toBe(fleet.length - 1);
    expect(await settings("durable")).toMatchObject({ hotThreshold: 5, streamKeepAliveMs: 500 });
    const { groups } = await registry().records();
    const stored = groups.find((g) => g.settings.name === "durable");
    expect(stored?.deployments.map((d) => d.spec.schedulingPolicy)).toEqual(ids.map(() => "fcfs"));
    await routesWithout("durable", "sim-1");
  });
});

describe("a deploy whose config leaves modelGroups out", () => {
  it("after a fleet apply (Deploy → The fleet): the fleet stays as the apply made it", async () => {
    // `npx kvgate fleet export`, an edit, `npx kvgate fleet apply`: the config's groups stay the config's where unchanged.
    const exported = await ok<{ rev: number; modelGroups: { name: string; deployments: { id?: string }[] }[] }>(admin("/admin/v1/fleet"));
    const placed = exported.modelGroups.find((g) => g.name === "placed");
    placed?.deployments.push({ id: "ops-1", baseUrl: fleet[1], model: UPSTREAM_MODEL } as { id: string });
    await ok(admin("/admin/v1/fleet", { method: "PUT", json: exported }));
    const applied = (await registry().records()).groups;

    const { modelGroups: _, ...withoutGroups } = config;
    const logged = vi.spyOn(console, "log");
    const deployed = await runInDurableObject(registry(), (_o, state) => new FleetRegistry(state, { ...env, KVGATE_CONFIG: JSON.stringify(withoutGroups) }).records());

    expect(deployed.groups).toEqual(applied);
    expect(events(logged).filter((e) => e.event === "registry" || String(e.event).startsWith("seed_"))).toEqual([]);
    await evictDurableObject(registry());
    expect(await deploymentIds("placed")).toEqual(["sim-0", "ops-1"]);
  });

  it('with "modelGroups": [] drops the config\'s servers, and names each it removed in a warn event', async () => {
    await ok(admin("/admin/v1/groups/skew/deployments", { method: "POST", json: { id: "ops-2", baseUrl: fleet[2], model: UPSTREAM_MODEL } }), 201);
    const skew = (await registry().records()).groups.find((g) => g.settings.name === "skew");
    const fromConfig = skew?.deployments.filter((d) => d.source === "config").map((d) => d.spec.id);
    const logged = vi.spyOn(console, "log");
    const deployed = await runInDurableObject(registry(), (_o, state) => new FleetRegistry(state, { ...env, KVGATE_CONFIG: JSON.stringify({ ...config, modelGroups: [] }) }).records());
    // The registry as that deploy left it; the pool's config seeds it back at its next start.
    await evictDurableObject(registry());

    expect(deployed.groups.find((g) => g.settings.name === "skew")?.deployments.map((d) => d.spec.id)).toEqual(["ops-2"]);
    expect(deployed.groups.find((g) => g.settings.name === "one-slot")).toBeUndefined();
    const removed = events(logged).filter((e) => e.event === "seed_removed");
    expect(removed).toContainEqual(expect.objectContaining({ level: "warn", group: "skew", deployments: fromConfig, groupRemoved: false }));
    expect(removed).toContainEqual(expect.objectContaining({ level: "warn", group: "one-slot", deployments: ["only"], groupRemoved: true }));
  });
});
