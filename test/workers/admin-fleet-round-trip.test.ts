import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it } from "vitest";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { shapeExcess } from "../../src/openai/body-shape.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok, refused } from "./admin.ts";
import { storeAsBefore, storedGroup } from "./stored-fleet.ts";

/**
 * `fleet export` then `fleet apply`: the PUT of what GET /admin/v1/fleet gave changes nothing,
 * for a fleet that holds more objects, arrays and keys than a client request may. An export fills
 * in every setting's default (about 48 nodes a group, 9 a deployment, some 20 bytes a node), so a
 * fleet of a thousand groups of ten deployments passes the client API's bound at about 3 MB.
 */

const fleetUrls = inject("upstreams").fleetUrls;
const registry = () => env.FLEET.getByName(REGISTRY_NAME);

type Fleet = { rev: number; modelGroups: { name: string; deployments: { id: string; baseUrl: string; weight?: number }[] }[] };

describe("a fleet exported and applied back", () => {
  it("changes nothing for a fleet past the client API's node bound; the admin body's own bound still refuses a body of bare brackets", async () => {
    // 14 groups of the most deployments a group takes: with the config's groups, just past 131,072 nodes.
    for (let i = 0; i < 14; i++) {
      const deployments = Array.from({ length: 1024 }, (_, d) => ({ id: `d${d}`, baseUrl: fleetUrls[0], model: UPSTREAM_MODEL }));
      await ok(admin("/admin/v1/groups", { method: "POST", json: { name: `round-trip-${i}`, deployments } }), 201);
    }
    const exported = await (await admin("/admin/v1/fleet")).text();
    // Past the bound a client's request is read with: what the admin PUT read its body with before.
    expect(shapeExcess(exported)).toMatchObject({ rule: "nodes", field: "modelGroups" });
    const applied = await ok<{ changed: string[]; removed: string[] }>(admin("/admin/v1/fleet", { method: "PUT", json: JSON.parse(exported) }));
    expect(applied).toMatchObject({ changed: [], removed: [] });

    // 4 MiB / 8 nodes: a body within the bytes, of nothing but empty arrays, is still counted and refused before it is parsed.
    const brackets = `{"modelGroups":[${"[],".repeat(600_000)}[]]}`;
    const e = await refused(admin("/admin/v1/fleet", { method: "PUT", body: brackets }), 400);
    expect(e).toMatchObject({ code: "json_too_complex", param: "modelGroups" });
    expect(e.message).toContain("524288");
  });

  it("changes nothing for a server stored before a rule it breaks; one listed with another spec is checked", async () => {
    const deployments = ["kept", "edited"].map((id) => ({ id, baseUrl: fleetUrls[0], model: UPSTREAM_MODEL }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "round-trip-older", deployments } }), 201);
    // As a release before 717f7e3 stored them: base URLs ending in /v1, which the schema now refuses.
    await runInDurableObject(registry(), (_o, state) => {
      const g = storedGroup(state.storage.sql, "round-trip-older");
      storeAsBefore(state.storage.sql, { ...g, deployments: g.deployments.map((d) => ({ ...d, spec: { ...d.spec, baseUrl: `${d.spec.baseUrl}/v1` } })) });
    });
    await evictDurableObject(registry());

    const exported = await ok<Fleet>(admin("/admin/v1/fleet"));
    const older = exported.modelGroups.find((g) => g.name === "round-trip-older");
    expect(older?.deployments.map((d) => d.baseUrl.endsWith("/v1"))).toEqual([true, true]);
    expect(await ok(admin("/admin/v1/fleet", { method: "PUT", json: exported }))).toMatchObject({ changed: [], removed: [] });

    // Edited, the server is checked as any new one: its base URL named, at its place in the body.
    const edited = older?.deployments[1];
    if (edited) edited.weight = 2;
    const e = await refused(admin("/admin/v1/fleet", { method: "PUT", json: exported }), 400);
    expect(e.param).toBe(`modelGroups[${exported.modelGroups.indexOf(older as Fleet["modelGroups"][number])}].deployments[1].baseUrl`);
    expect(e.message).toContain("without /v1");
  });

  it("changes nothing for a group stored listing a name twice, which no other change is then refused for; its aliases changed are checked", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "round-trip-twice", aliases: ["twice-a"], deployments: [{ id: "x", baseUrl: fleetUrls[0], model: UPSTREAM_MODEL }] } }), 201);
    // As a release before this rule stored them: an alias twice, and the group's own name as an alias.
    await runInDurableObject(registry(), (_o, state) => {
      const g = storedGroup(state.storage.sql, "round-trip-twice");
      g.settings.aliases = ["twice-a", "twice-a", "round-trip-twice"];
      storeAsBefore(state.storage.sql, g);
    });
    await evictDurableObject(registry());

    const exported = await ok<Fleet>(admin("/admin/v1/fleet"));
    expect(await ok(admin("/admin/v1/fleet", { method: "PUT", json: exported }))).toMatchObject({ changed: [], removed: [] });
    // Every change of the fleet checks it whole: the stored group's names would have refused them all.
    await ok(admin("/admin/v1/groups/round-trip-twice/deployments/x/drain", { method: "POST" }));
    await ok(admin("/admin/v1/groups/round-trip-twice", { method: "PATCH", json: { strategy: "round-robin" } }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "round-trip-twice-2", deployments: [] } }), 201);
    const e = await refused(admin("/admin/v1/groups/round-trip-twice", { method: "PATCH", json: { aliases: ["twice-a", "twice-b", "twice-b"] } }), 400);
    expect(e).toMatchObject({ code: "invalid_fleet", param: "aliases[2]" });
    await ok(admin("/admin/v1/groups/round-trip-twice", { method: "PATCH", json: { aliases: ["twice-a", "twice-b"] } }));
  });
});
