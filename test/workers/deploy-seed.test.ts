import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { FleetRegistry } from "../../durable-objects/fleet-registry.ts";
import { parseConfig } from "../../src/config/load.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { fnv1a64 } from "../../src/fnv64.ts";
import { shardObjectName } from "../../src/sharding/partition.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { chat, EVENTUALLY, status } from "./gateway.ts";
import { storeAsBefore, storedGroup } from "./stored-fleet.ts";

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
      const g = storedGroup(sql, "durable");
      const { streamKeepAliveMs: _, ...older } = g.settings;
      const deployments = g.deployments.map((d) => {
        const { schedulingPolicy: _p, ...spec } = d.spec;
        return { ...d, spec };
      });
      storeAsBefore(sql, { ...g, settings: older, deployments });
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

describe("a deploy whose config changes the fleet tells the routing objects", () => {
  const groups = config.modelGroups as { name: string; shards?: number }[];
  /** The config with `group` as `edit` makes it, or left out when `edit` gives null. */
  const withGroup = (group: string, edit: (g: { name: string; shards?: number }) => object | null) => {
    const modelGroups = groups.flatMap((g) => {
      const edited = g.name === group ? edit(g) : g;
      return edited === null ? [] : [edited];
    });
    return JSON.stringify({ ...config, modelGroups });
  };
  const served = async (group: string, prompt: string) => {
    const res = await chat(group, [{ role: "user", content: prompt }]);
    expect(res.status).toBe(200);
    await res.text();
  };

  it("writes the registry event a command writes, naming the groups it changed and the ones it removed", async () => {
    const modelGroups = groups.flatMap((g) => (g.name === "one-slot" ? [] : [g.name === "placed" ? { ...g, hotThreshold: 7 } : g]));
    // The registry has taken the pool's config already (its first start, a seed of its own).
    await registry().records();
    const logged = vi.spyOn(console, "log");
    const deployed = await runInDurableObject(registry(), (_o, state) => new FleetRegistry(state, { ...env, KVGATE_CONFIG: JSON.stringify({ ...config, modelGroups }) }).records());
    // The registry as that deploy left it; the pool's config seeds it back at its next start.
    await evictDurableObject(registry());

    expect(events(logged).filter((e) => e.event === "registry")).toEqual([expect.objectContaining({ level: "info", op: "seed", rev: deployed.rev, changed: ["placed"], removed: ["one-slot"] })]);
  });

  it("a group it drops: its object is retired, as by an admin DELETE, and routes (and probes) nothing", async () => {
    // Its object knows the group: a request went through it.
    await served("one-slot", "known?");
    expect((await status("one-slot")).backends.filter((b) => b.takesRequests)).toHaveLength(1);
    const deployed = await runInDurableObject(registry(), (_o, state) => new FleetRegistry(state, { ...env, KVGATE_CONFIG: withGroup("one-slot", () => null) }).records());
    expect(deployed.groups.find((g) => g.settings.name === "one-slot")).toBeUndefined();

    await vi.waitFor(async () => {
      const s = await status("one-slot");
      expect([s.rev >= deployed.rev, s.backends.filter((b) => b.takesRequests)]).toEqual([true, []]);
    }, EVENTUALLY);
    // The registry as that deploy left it; the pool's config seeds the group back at its next start.
    await evictDurableObject(registry());
    await served("one-slot", "back?");
  });

  it("a group it drops while its object cannot be reached: retired when the registry pushes again", async () => {
    await served("evicted-usage", "known?");
    const fail = () => Promise.reject(new Error("Durable Object is overloaded. Too many requests queued."));
    const down = { getByName: () => ({ install: fail, retire: fail }) } as unknown as typeof env.MODEL_GROUP;
    await runInDurableObject(registry(), async (_o, state) => {
      const deploy = { ...env, KVGATE_CONFIG: withGroup("evicted-usage", () => null) };
      const deployed = new FleetRegistry(state, { ...deploy, MODEL_GROUP: down });
      const unpushed = () => state.storage.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'unpushed'").toArray()[0]?.v;
      await vi.waitFor(() => expect(JSON.parse(unpushed() ?? "[]")).toContain("evicted-usage"), EVENTUALLY);
      // The objects are reachable again; the registry's alarm, once the try is due (1 s).
      (deployed as unknown as { env: unknown }).env = deploy;
      await vi.waitFor(
        async () => {
          await deployed.alarm();
          expect(JSON.parse(unpushed() ?? "[]")).toEqual([]);
        },
        { timeout: 5_000, interval: 200 },
      );
      expect((await status("evicted-usage")).backends.filter((b) => b.takesRequests)).toEqual([]);
    });
    await evictDurableObject(registry());
    await served("evicted-usage", "back?");
  });

  it("shards it lowers: the given-up shard's object is retired, hands its counts over once idle, and is asked no more", async () => {
    const given = shardObjectName("sharded", 1);
    // Both objects know the group.
    for (let i = 0; i < 8; i++) await served("sharded", `walrus ${i}`);
    expect((await status(given)).backends.filter((b) => b.takesRequests).length).toBeGreaterThan(0);
    await runInDurableObject(registry(), async (_o, state) => {
      const deployed = new FleetRegistry(state, { ...env, KVGATE_CONFIG: withGroup("sharded", (g) => ({ ...g, shards: 1 })) });
      expect(deployed.snapshot().objects?.sharded).toBe(2);
      await vi.waitFor(async () => expect((await status(given)).backends.filter((b) => b.takesRequests)).toEqual([]), EVENTUALLY);
      // Its alarm, each run: the hand-over is tried every 5 s, and nothing is in flight.
      await vi.waitFor(
        async () => {
          await deployed.alarm();
          expect(deployed.snapshot().objects?.sharded).toBeUndefined();
        },
        { timeout: 20_000, interval: 500 },
      );
    });
    await evictDurableObject(registry());
    await served("sharded", "walrus 0");
  }, 40_000);

  it("keeps an operator's drain of a config server that a fleet apply edited", async () => {
    const row = () => ok<{ state: string; source: string; takesRequests: boolean }>(admin("/admin/v1/groups/one-slot/deployments/only"));
    // `npx kvgate fleet export`, the server's weight edited, `npx kvgate fleet apply`: the server is the operator's.
    const exported = await ok<{ rev: number; modelGroups: { name: string; deployments: { id: string; weight?: number }[] }[] }>(admin("/admin/v1/fleet"));
    const edited = exported.modelGroups.find((g) => g.name === "one-slot")?.deployments.find((d) => d.id === "only");
    if (!edited) throw new Error("the export has no one-slot server");
    edited.weight = 2;
    await ok(admin("/admin/v1/fleet", { method: "PUT", json: exported }));
    await ok(admin("/admin/v1/groups/one-slot/deployments/only/drain", { method: "POST" }));
    expect(await row()).toMatchObject({ state: "draining", source: "admin" });
    // A deploy whose modelGroups differ (another group's setting): the config's server again, still drained.
    const config = withGroup("placed", (g) => ({ ...g, hotThreshold: 7 }));
    const deployed = await runInDurableObject(registry(), (_o, state) => new FleetRegistry(state, { ...env, KVGATE_CONFIG: config }).records());
    const only = deployed.groups.find((g) => g.settings.name === "one-slot")?.deployments.find((d) => d.spec.id === "only");
    expect([only?.source, only?.state, only?.spec.weight]).toEqual(["config", "draining", 1]);
    await vi.waitFor(async () => expect((await status("one-slot")).backends.filter((b) => b.takesRequests)).toEqual([]), EVENTUALLY);
    // The registry as that deploy left it; the pool's config seeds it back at its next start, the drain kept: enabled again.
    await evictDurableObject(registry());
    await ok(admin("/admin/v1/groups/one-slot/deployments/only/enable", { method: "POST" }));
    await served("one-slot", "back?");
  });
});
