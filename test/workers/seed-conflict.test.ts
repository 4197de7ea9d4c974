import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import type { FleetStatus, GroupRow } from "../../src/fleet/admin-api.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { storeAsBefore, storedGroup } from "./stored-fleet.ts";

/**
 * A deploy whose modelGroups clash with a group the admin API added since the last one. The
 * registry restarts with the new config as after a deploy: the seed it took is forgotten (as if
 * the last deploy's modelGroups were other ones), and the object evicted.
 */

const fleet = inject("upstreams").fleetUrls;
const registry = () => env.FLEET.getByName(REGISTRY_NAME);

afterEach(() => {
  vi.restoreAllMocks();
});

/** Restarts the registry as a deploy that changed modelGroups does, `edit` having made its stored groups the last deploy's; the event lines it writes. */
async function deployed(edit: (sql: SqlStorage) => void = () => undefined): Promise<Record<string, unknown>[]> {
  await runInDurableObject(registry(), (_o, state) => {
    edit(state.storage.sql);
    state.storage.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('seed', 'the last deploy')");
  });
  const logged = vi.spyOn(console, "log");
  await evictDurableObject(registry());
  await registry().snapshot();
  return logged.mock.calls.flatMap((c) => (String(c[0]).startsWith("{") ? [JSON.parse(String(c[0])) as Record<string, unknown>] : []));
}

const deploymentIds = async (group: string) => (await ok<{ data: { id: string }[] }>(admin(`/admin/v1/groups/${group}/deployments`))).data.map((d) => d.id);
const group = (name: string) => ok<GroupRow & { aliases: string[] }>(admin(`/admin/v1/groups/${name}`));
/** The group's index in the config's own modelGroups: how a refused seed names a field of one of them. */
const configIndex = (name: string) => (JSON.parse(env.KVGATE_CONFIG) as { modelGroups: { name: string }[] }).modelGroups.findIndex((g) => g.name === name);

describe("a deploy giving a group an alias an admin-added group holds", () => {
  it("takes the config's groups without that alias, which stays with its holder, and says so in a warn event and the status", async () => {
    // The last deploy's seed-claim had another server and no alias; the operator then gave the alias to a group of its own.
    await ok(admin("/admin/v1/groups/seed-claim", { method: "PATCH", json: { aliases: [] } }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "seed-holder", aliases: ["seed-claimed"], deployments: [{ id: "ops", baseUrl: fleet[1], model: UPSTREAM_MODEL }] } }), 201);
    const events = await deployed((sql) => {
      const g = storedGroup(sql, "seed-claim");
      const [only] = g.deployments;
      if (!only) throw new Error("seed-claim has no deployment");
      g.deployments = [{ ...only, spec: { ...only.spec, id: "old", baseUrl: fleet[2] as string } }];
      storeAsBefore(sql, g);
    });

    // The new config's server, not the last deploy's.
    expect(await deploymentIds("seed-claim")).toEqual(["sim-0"]);
    expect((await group("seed-claim")).aliases).toEqual([]);
    expect((await group("seed-holder")).aliases).toEqual(["seed-claimed"]);
    const held = { group: "seed-claim", alias: "seed-claimed", holder: "seed-holder" };
    expect(events.filter((e) => e.event === "seed_alias_held")).toEqual([expect.objectContaining({ level: "warn", ...held })]);
    const status = await ok<FleetStatus>(admin("/admin/v1/status"));
    expect(status.seed).toEqual({ state: "taken", rev: status.rev, aliasesHeld: [held] });
  });
});

describe("a deploy the fleet refuses whole", () => {
  it("keeps the fleet as it was and says why, in a warn event and the status; tried again at the next start", async () => {
    // The last deploy had no seed-refused; the operator then gave its name to a group as an alias.
    await ok(admin("/admin/v1/groups/seed-refused", { method: "DELETE" }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "seed-squatter", aliases: ["seed-refused"], deployments: [] } }), 201);
    const { rev } = await ok<FleetStatus>(admin("/admin/v1/status"));
    const events = await deployed();

    // Named by its place in the config, not in the fleet (which lists the groups it kept first).
    const param = `modelGroups[${configIndex("seed-refused")}].name`;
    const message = `${param} "seed-refused" is already the name or alias of another group`;
    expect(events.filter((e) => e.event === "seed_refused")).toEqual([expect.objectContaining({ level: "warn", message, rev })]);
    const status = await ok<FleetStatus>(admin("/admin/v1/status"));
    expect(status.rev).toBe(rev);
    expect(status.seed).toEqual({ state: "refused", message, param });
    expect((await admin("/admin/v1/groups/seed-refused")).status).toBe(404);

    // Tried again at the next start, and taken once the clash is gone.
    await ok(admin("/admin/v1/groups/seed-squatter", { method: "DELETE" }));
    await evictDurableObject(registry());
    expect(await deploymentIds("seed-refused")).toEqual(["sim-0"]);
    expect((await ok<FleetStatus>(admin("/admin/v1/status"))).seed).toMatchObject({ state: "taken" });
  });
});

describe("an operator's drain of a config deployment, after a deploy", () => {
  it("holds through a fleet apply that lists the deployment with another spec, as before the deploy", async () => {
    const row = async () => (await ok<{ data: { id: string; state: string; weight: number }[] }>(admin("/admin/v1/groups/seed-claim/deployments"))).data.find((d) => d.id === "sim-0");
    await ok(admin("/admin/v1/groups/seed-claim/deployments/sim-0/drain", { method: "POST" }));
    await deployed();
    expect(await row()).toMatchObject({ state: "draining" });
    // The operator gives it another weight with `fleet export` and `fleet apply`: a changed spec becomes the operator's, its drain kept.
    const exported = await ok<{ modelGroups: { name: string; deployments: { id?: string; weight?: number }[] }[] }>(admin("/admin/v1/fleet"));
    const claim = exported.modelGroups.find((g) => g.name === "seed-claim");
    const server = claim?.deployments.find((d) => d.id === "sim-0");
    if (!server) throw new Error("seed-claim has no sim-0");
    server.weight = 3;
    await ok(admin("/admin/v1/fleet", { method: "PUT", json: { modelGroups: exported.modelGroups } }));
    expect(await row()).toMatchObject({ weight: 3, state: "draining" });
  });
});

describe("a deploy dropping a group an admin group falls back to", () => {
  it("is refused naming the admin group, which the config does not hold, with no param (found by review)", async () => {
    // The last deploy listed seed-dropped; the operator made seed-falls-back fall back to it.
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "seed-dropped", deployments: [{ id: "d", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } }), 201);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "seed-falls-back", fallbacks: ["seed-dropped"], deployments: [] } }), 201);
    const { rev } = await ok<FleetStatus>(admin("/admin/v1/status"));
    await deployed((sql) => {
      sql.exec("UPDATE fleet_groups SET record = json_set(record, '$.source', 'config') WHERE name = 'seed-dropped'");
      sql.exec("UPDATE fleet_deployments SET record = json_set(record, '$.source', 'config') WHERE grp = 'seed-dropped'");
    });

    const status = await ok<FleetStatus>(admin("/admin/v1/status"));
    expect(status.rev).toBe(rev);
    expect(status.seed).toEqual({ state: "refused", message: 'group "seed-falls-back": fallbacks[0] "seed-dropped" names no group', param: null });
    expect(await deploymentIds("seed-dropped")).toEqual(["d"]);

    // Taken at the next start once no group falls back to it: the dropped group goes.
    await ok(admin("/admin/v1/groups/seed-falls-back", { method: "DELETE" }));
    await evictDurableObject(registry());
    expect((await ok<FleetStatus>(admin("/admin/v1/status"))).seed).toMatchObject({ state: "taken" });
    expect((await admin("/admin/v1/groups/seed-dropped")).status).toBe(404);
  });
});
