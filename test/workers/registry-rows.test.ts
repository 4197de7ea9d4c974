import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import type { GroupRecord } from "../../src/fleet/registry.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { objectNamesOf } from "../../src/sharding/partition.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { failNext } from "./storage-faults.ts";
import { storeAsBefore, storeFleetAsBefore } from "./stored-fleet.ts";

/**
 * What the fleet registry writes to its SQLite storage, read in the object itself: a server's
 * heartbeat in a group of hundreds writes that server's row, not the whole group; a restart
 * loads the fleet as it was, whatever order its changes left it in; and a fleet stored by the
 * release before (each group one row, its deployments in it) loads as it was and is stored anew,
 * leaving that release a fleet to find after a rollback.
 */

const fleet = inject("upstreams").fleetUrls;
const registry = () => env.FLEET.getByName(REGISTRY_NAME);

/** The rows SQLite wrote and the bytes of the values bound, over the statements that wrote any. */
interface Written {
  rows: number;
  bytes: number;
}

/** What the registry's statements wrote while `action` (calls through the gateway) ran. */
async function writtenBy(action: () => Promise<unknown>): Promise<Written> {
  const seen: { cursor: SqlStorageCursor<Record<string, SqlStorageValue>>; bytes: number }[] = [];
  let exec: SqlStorage["exec"] | undefined;
  await runInDurableObject(registry(), (_o, state) => {
    const sql = state.storage.sql;
    const original = sql.exec;
    exec = original;
    sql.exec = ((query: string, ...bindings: unknown[]) => {
      const cursor = original.call(sql, query, ...bindings);
      seen.push({ cursor, bytes: bindings.reduce<number>((n, b) => n + (typeof b === "string" ? b.length : 8), 0) });
      return cursor;
    }) as typeof sql.exec;
  });
  try {
    await action();
  } finally {
    await runInDurableObject(registry(), (_o, state) => {
      if (exec) state.storage.sql.exec = exec;
    });
  }
  const writes = seen.filter((s) => s.cursor.rowsWritten > 0);
  return { rows: writes.reduce((n, s) => n + s.cursor.rowsWritten, 0), bytes: writes.reduce((n, s) => n + s.bytes, 0) };
}

/** A group of `n` deployments the admin API added, each with a spec of about 150 bytes. */
async function bigGroup(name: string, n: number): Promise<void> {
  const deployments = Array.from({ length: n }, (_, i) => ({ id: `gpu-${i}`, baseUrl: `${fleet[0]}/pool-${i}`, model: UPSTREAM_MODEL }));
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name, deployments } }), 201);
}

const beat = (group: string, id: string, ttlSeconds = 600) => ok(admin("/admin/v1/heartbeats", { method: "POST", json: { group, id, baseUrl: fleet[1], model: UPSTREAM_MODEL, ttlSeconds } }, env.KVGATE_REGISTER_KEY));
const records = async () => (await registry().records()).groups;

/** The fleet as the release before (6246caf) loads it after a rollback: each row of `groups` a whole GroupRecord, in `pos` order. */
const asBefore = () => runInDurableObject(registry(), (_o, state) => state.storage.sql.exec<{ record: string }>("SELECT record FROM groups ORDER BY pos").toArray().map((r) => JSON.parse(r.record) as GroupRecord));

/** `action` run with the clock `ms` ahead. */
async function later<T>(ms: number, action: () => Promise<T>): Promise<T> {
  const now = Date.now();
  const clock = vi.spyOn(Date, "now").mockReturnValue(now + ms);
  try {
    return await action();
  } finally {
    clock.mockRestore();
  }
}

describe("the fleet registry's storage", () => {
  it("a gateway first started on this release leaves the release before the fleet it has", async () => {
    // The first test of the file: the registry starts here, on this release, seeded from the config.
    await bigGroup("rows-fresh", 2);
    await ok(admin("/admin/v1/groups/rows-fresh/deployments/gpu-1/disable", { method: "POST" }));
    // Empty at fbe621b: after a rollback every model was a 404.
    expect(await asBefore()).toEqual(await records());
  });

  it("a registry fbe621b stored, its groups of the release before left behind, writes them whole at its next start", async () => {
    const had = await records();
    await runInDurableObject(registry(), (_o, state) => {
      const sql = state.storage.sql;
      // fbe621b's: its layout's mark, and `groups` as at its first start (a new object: none).
      sql.exec("UPDATE meta SET v = 'rows' WHERE k = 'layout'");
      sql.exec("DELETE FROM groups");
      sql.exec("DELETE FROM groups_written");
    });
    await evictDurableObject(registry());
    expect(await records()).toEqual(had);
    expect(await asBefore()).toEqual(had);
  });

  it("a heartbeat renewing a server of a group of hundreds writes that server's row alone, and the group whole once its expiry there lags", async () => {
    await bigGroup("rows-big", 300);
    await beat("rows-big", "hb-0");
    const renewal = await writtenBy(() => beat("rows-big", "hb-0"));
    // The whole group was rewritten (and the fleet's revision, unchanged): 6 rows, 84 KB at 6246caf.
    expect(renewal.rows).toBe(1);
    expect(renewal.bytes).toBeLessThan(1024);
    // Its expiry there could pass before its next heartbeat (¾ of 600 s), a slot (150 s) after the
    // last rewrite: the group's row of the release before too, once (the row, the trigger's note, its clearing).
    const whole = JSON.stringify((await records()).find((g) => g.settings.name === "rows-big")).length;
    const due = await later(301_000, () => writtenBy(() => beat("rows-big", "hb-0")));
    expect(due.rows).toBe(5);
    expect(due.bytes).toBeGreaterThan(whole);
    expect((await later(302_000, () => writtenBy(() => beat("rows-big", "hb-0")))).rows).toBe(1);
    // A new server's registration, a drain: the group's own row, the server's, the fleet's
    // revision, and the group's row of the release before (with the trigger's note and its clearing);
    // and the routing objects owed the change's push, stored with it and taken off once it is pushed.
    const registration = await writtenBy(() => beat("rows-big", "hb-1"));
    expect(registration.rows).toBe(9);
    expect(registration.bytes - whole).toBeLessThan(4096);
    const drain = await writtenBy(() => ok(admin("/admin/v1/groups/rows-big/deployments/gpu-7/drain", { method: "POST" })));
    expect(drain.rows).toBe(9);
    expect(drain.bytes - whole).toBeLessThan(4096);
  });

  it("servers renewing every half TTL rewrite their group whole once per quarter of its TTL, not at each one's renewal", async () => {
    await bigGroup("rows-slot", 300);
    const servers = ["hb-0", "hb-1", "hb-2", "hb-3"];
    for (const id of servers) await beat("rows-slot", id, 20);
    const whole = JSON.stringify((await records()).find((g) => g.settings.name === "rows-slot")).length;
    let renewedAt = 0;
    for (const ms of [10_000, 20_000, 30_000]) {
      const renewals = await later(ms, async () => {
        renewedAt = Date.now();
        const each: Written[] = [];
        for (const id of servers) each.push(await writtenBy(() => beat("rows-slot", id, 20)));
        return each;
      });
      // At 52f9ef2 each of them rewrote the group (5 rows, over 86 KB): its expiry there was half a TTL behind.
      expect(renewals.map((w) => w.rows)).toEqual([5, 1, 1, 1]);
      expect(renewals[0]?.bytes).toBeGreaterThan(whole);
      expect(renewals.slice(1).every((w) => w.bytes < 1024)).toBe(true);
    }
    // The renewals after the rewrite are in the release before's row by the end of the slot (5 s), whatever comes: the alarm's.
    await later(35_000, () => runDurableObjectAlarm(registry()));
    const old = (await asBefore()).find((g) => g.settings.name === "rows-slot");
    for (const id of servers) expect(old?.deployments.find((d) => d.spec.id === id)?.expiresAt).toBeGreaterThanOrEqual(renewedAt + 20_000);
  });

  it("a heartbeat that changes its TTL is in the release before's row at once", async () => {
    await bigGroup("rows-ttl", 2);
    await beat("rows-ttl", "hb-ttl", 600);
    await beat("rows-ttl", "hb-ttl", 30);
    // At 52f9ef2 a renewal: the row kept the TTL of 600 s, and an expiry 10 minutes ahead.
    expect(await asBefore()).toEqual(await records());
  });

  it("a restart loads each group and its deployments in the order its changes left them", async () => {
    await bigGroup("rows-order", 6);
    await beat("rows-order", "hb-a");
    await ok(admin("/admin/v1/groups/rows-order/deployments/gpu-0", { method: "DELETE" }));
    await ok(admin("/admin/v1/groups/rows-order/deployments", { method: "POST", json: { id: "late", baseUrl: fleet[2], model: UPSTREAM_MODEL } }), 201);
    await bigGroup("rows-after", 2);
    await ok(admin("/admin/v1/groups/rows-order/deployments/gpu-3/disable", { method: "POST" }));
    // A fleet put back reordered: groups and deployments in other orders, one group gone.
    const exported = await ok<{ rev: number; modelGroups: { name: string; deployments: unknown[] }[] }>(admin("/admin/v1/fleet"));
    const order = exported.modelGroups.find((g) => g.name === "rows-order");
    if (!order) throw new Error("rows-order was not exported");
    order.deployments = [order.deployments[4], { id: "first", baseUrl: fleet[3], model: UPSTREAM_MODEL }, ...order.deployments.slice(0, 4), ...order.deployments.slice(5)];
    const groups = exported.modelGroups.filter((g) => g.name !== "rows-after" && g.name !== "rows-order");
    await ok(admin("/admin/v1/fleet", { method: "PUT", json: { rev: exported.rev, modelGroups: [groups[0], order, ...groups.slice(1)] } }));
    await bigGroup("rows-last", 1);
    const before = await records();
    expect(before.find((g) => g.settings.name === "rows-order")?.deployments.map((d) => d.spec.id)).toEqual(["gpu-5", "first", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "hb-a", "late"]);

    await evictDurableObject(registry());
    expect(await records()).toEqual(before);
  });

  it("a fleet the release before stored, each group one row with its deployments, loads as it was and is stored anew", async () => {
    await bigGroup("rows-old", 5);
    await beat("rows-old", "hb-old");
    await ok(admin("/admin/v1/groups/rows-old/deployments/gpu-2/drain", { method: "POST" }));
    const before = await records();
    await runInDurableObject(registry(), (_o, state) => storeFleetAsBefore(state.storage.sql, before));
    await evictDurableObject(registry());
    expect(await records()).toEqual(before);

    const stored = await runInDurableObject(registry(), (_o, state) => {
      const sql = state.storage.sql;
      const own = sql.exec<{ record: string }>("SELECT record FROM fleet_groups").toArray().map((r) => JSON.parse(r.record) as Partial<GroupRecord>);
      return { groups: own.length, withDeployments: own.filter((g) => g.deployments !== undefined).length, deployments: sql.exec<{ n: number }>("SELECT count(*) AS n FROM fleet_deployments").one().n };
    });
    expect(stored).toEqual({ groups: before.length, withDeployments: 0, deployments: before.reduce((n, g) => n + g.deployments.length, 0) });
    // Stored anew: a renewal writes its row, and the next start loads the same fleet.
    expect((await writtenBy(() => beat("rows-old", "hb-old"))).rows).toBe(1);
    const renewed = await records();
    await evictDurableObject(registry());
    expect(await records()).toEqual(renewed);
  });

  it("a rollback to the release before finds the fleet it left, and the groups it changes come forward again", async () => {
    await bigGroup("rows-back", 2);
    await bigGroup("rows-kept", 2);
    const left = await records();
    await runInDurableObject(registry(), (_o, state) => storeFleetAsBefore(state.storage.sql, left));
    await evictDurableObject(registry());
    // This release changes both groups; the release before's table has each group whole, as this one has it.
    await ok(admin("/admin/v1/groups/rows-back/deployments/gpu-0/drain", { method: "POST" }));
    await ok(admin("/admin/v1/groups/rows-kept/deployments/gpu-1", { method: "DELETE" }));
    expect(await asBefore()).toEqual(await records());
    // Rolled back, the release before removes a deployment of one group, adds a group and removes another; then a deploy forward again.
    const [again] = (await asBefore()).filter((g) => g.settings.name === "rows-back");
    if (!again) throw new Error("rows-back was not stored");
    const doomed = left.find((g) => g.settings.name !== "rows-back" && g.settings.name !== "rows-kept")?.settings.name as string;
    await runInDurableObject(registry(), (_o, state) => {
      const sql = state.storage.sql;
      storeAsBefore(sql, { ...again, deployments: again.deployments.slice(1) });
      storeAsBefore(sql, { ...again, settings: { ...again.settings, name: "rows-new" } });
      sql.exec("DELETE FROM groups WHERE name = ?", doomed);
    });
    await evictDurableObject(registry());
    const forward = await records();
    const names = forward.map((g) => g.settings.name);
    expect(names).not.toContain(doomed);
    expect(names.slice(-1)).toEqual(["rows-new"]);
    expect(forward.find((g) => g.settings.name === "rows-back")?.deployments.map((d) => [d.spec.id, d.state])).toEqual([["gpu-1", "active"]]);
    // A group the release before left alone is as this release had it.
    expect(forward.find((g) => g.settings.name === "rows-kept")?.deployments.map((d) => d.spec.id)).toEqual(["gpu-0"]);
    // And the release before's table is the fleet as this one took it, in its order.
    expect(await asBefore()).toEqual(forward);
  });

  it("after the upgrade, the release before finds each change since: a disable, a removal, a renewal", async () => {
    await bigGroup("rows-roll", 3);
    await beat("rows-roll", "hb-roll");
    const upgraded = await records();
    await runInDurableObject(registry(), (_o, state) => storeFleetAsBefore(state.storage.sql, upgraded));
    await evictDurableObject(registry());
    await ok(admin("/admin/v1/groups/rows-roll/deployments/gpu-1/disable", { method: "POST" }));
    await ok(admin("/admin/v1/groups/rows-roll/deployments/gpu-2", { method: "DELETE" }));
    // Past half the server's TTL (600 s): its renewal rewrites the group's row of the release before.
    const renewedAt = Date.now() + 400_000;
    await later(400_000, () => beat("rows-roll", "hb-roll"));
    const old = (await asBefore()).find((g) => g.settings.name === "rows-roll");
    // At fbe621b: gpu-1 active, gpu-2 there, hb-roll's expiry that of the upgrade (the release before drains it at once).
    expect(old?.deployments.map((d) => [d.spec.id, d.state])).toEqual([
      ["gpu-0", "active"],
      ["gpu-1", "disabled"],
      ["hb-roll", "active"],
    ]);
    expect(old?.deployments.find((d) => d.spec.id === "hb-roll")?.expiresAt).toBeGreaterThanOrEqual(renewedAt + 600_000);
    expect(await asBefore()).toEqual(await records());
  });

  it("a change whose write failed is written with the next change, and holds after a restart", async () => {
    await bigGroup("rows-fail", 10);
    await failNext(registry(), "INSERT INTO fleet_deployments");
    expect((await admin("/admin/v1/groups/rows-fail/deployments/gpu-7/drain", { method: "POST" })).status).toBe(500);
    await ok(admin("/admin/v1/groups/rows-fail/deployments/gpu-8/drain", { method: "POST" }));
    const before = await records();
    expect(before.find((g) => g.settings.name === "rows-fail")?.deployments.filter((d) => d.state === "draining").map((d) => d.spec.id)).toEqual(["gpu-7", "gpu-8"]);
    await evictDurableObject(registry());
    // At fbe621b gpu-7 came back active: the failed write's marks were gone, and gpu-8's drain wrote its own rows alone.
    expect(await records()).toEqual(before);
    expect(await asBefore()).toEqual(before);
  });

  it("a drain whose write failed reaches the routing object once written: the drain retried is applied", async () => {
    await bigGroup("rows-unpushed", 3);
    await failNext(registry(), "INSERT INTO fleet_deployments");
    expect((await admin("/admin/v1/groups/rows-unpushed/deployments/gpu-1/drain", { method: "POST" })).status).toBe(500);
    const retried = await ok<{ routing: string }>(admin("/admin/v1/groups/rows-unpushed/deployments/gpu-1/drain", { method: "POST" }));
    expect(retried.routing).toBe("applied");
    // At 52f9ef2 the retry found gpu-1 draining, pushed nothing and answered "applied": the object still routed to it.
    const [object] = objectNamesOf("rows-unpushed", undefined);
    const status = await env.MODEL_GROUP.getByName(object as string).status();
    expect(status.backends.find((b) => b.id === "gpu-1")?.takesRequests).toBe(false);
  });

  it("a group removal whose write failed retires the group's routing object once written", async () => {
    await bigGroup("rows-unretired", 2);
    const [object] = objectNamesOf("rows-unretired", undefined);
    const stub = env.MODEL_GROUP.getByName(object as string);
    const retired = () => runInDurableObject(stub, async (_o, state) => (await state.storage.get("retired")) !== undefined);
    expect(await retired()).toBe(false);
    await failNext(registry(), "DELETE FROM fleet_groups");
    expect((await admin("/admin/v1/groups/rows-unretired", { method: "DELETE" })).status).toBe(500);
    // Gone from the fleet already: the retry is a 404, and writes nothing.
    expect((await admin("/admin/v1/groups/rows-unretired", { method: "DELETE" })).status).toBe(404);
    // The registry's alarm writes it again, then retires the object (at 52f9ef2 nothing ever did).
    await later(2_000, () => runDurableObjectAlarm(registry()));
    await vi.waitFor(async () => expect(await retired()).toBe(true));
    expect((await records()).map((g) => g.settings.name)).not.toContain("rows-unretired");
    expect((await asBefore()).map((g) => g.settings.name)).not.toContain("rows-unretired");
  });
});
