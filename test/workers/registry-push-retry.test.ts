import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect, inject, it, vi } from "vitest";
import type { DeploymentRow } from "../../src/fleet/admin-api.ts";
import type { AdminResult } from "../../src/fleet/protocol.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { FleetRegistry } from "../../durable-objects/fleet-registry.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { chat, EVENTUALLY } from "./gateway.ts";

/**
 * A change the registry made is pushed to the group's routing object before it is answered; when
 * that object cannot be reached (overloaded, being reset) the answer says "pending". A changed
 * group's next request from an isolate that read the change brings it along, but nothing brings a
 * removal: an isolate still holding the old fleet routes through the object as before, and the
 * object, never told, serves the group it no longer has. The push is what must come again.
 * The routing objects are real; the registry's way to them fails on purpose for one command.
 */

const fleet = inject("upstreams").fleetUrls;
const registry = () => env.FLEET.getByName(REGISTRY_NAME);

/** Where the registry's alarm is moved once read: out of the runtime's reach for the test's length. */
const PARKED_MS = 3_600_000;

/**
 * `run` in the registry with every call to a routing object failing, as when none can be reached;
 * and the registry's alarm then, which is moved an hour on: the runtime runs a Durable Object's
 * alarm by itself, and would else push at +1 s whatever the test had still to do before it
 * (a row read, a chat), and race the test's own run of it (alarmAt). The registry sets it again
 * at its next command or alarm.
 */
async function withObjectsDown<T>(run: (registry: FleetRegistry) => Promise<T>): Promise<{ value: T; alarm: number | null }> {
  return runInDurableObject(registry(), async (instance: FleetRegistry, state) => {
    const own = instance as unknown as { env: Record<string, unknown> };
    const real = own.env;
    const down = { getByName: () => ({ install: () => Promise.reject(new Error("overloaded")), retire: () => Promise.reject(new Error("overloaded")) }) };
    own.env = { ...real, MODEL_GROUP: down };
    try {
      const value = await run(instance);
      const alarm = await state.storage.getAlarm();
      if (alarm !== null) await state.storage.setAlarm(Date.now() + PARKED_MS);
      return { value, alarm };
    } finally {
      own.env = real;
    }
  });
}

/** The registry's alarm, run once `due` has come (as the runtime would run it), not before; `due` as withObjectsDown read it. */
async function alarmAt(due: number | null): Promise<void> {
  expect(due, "the registry armed no alarm").not.toBeNull();
  await new Promise((done) => setTimeout(done, Math.max(0, (due as number) - Date.now())));
  await runInDurableObject(registry(), (r: FleetRegistry) => r.alarm());
}

/** The command's answer, and when the registry's alarm is due (withObjectsDown). */
const unreachableObjects = async (cmd: Parameters<FleetRegistry["command"]>[0]): Promise<{ value: AdminResult; alarm: number | null }> => withObjectsDown((r) => r.command(cmd));

it("a group removed while its routing object could not be reached stops being served once the registry pushes again", async () => {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-retry", deployments: [{ id: "sim-0", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  const served = await chat("push-retry", [{ role: "user", content: "hello" }]);
  expect(served.status).toBe(200);
  await served.text();

  const { value: removed, alarm } = await unreachableObjects({ op: "remove-group", group: "push-retry" });
  expect(removed).toMatchObject({ ok: true, removed: ["push-retry"], routing: "pending" });
  // This isolate read the fleet before the removal: it routes through the object, which was never told.
  const stale = await chat("push-retry", [{ role: "user", content: "still there?" }]);
  await stale.text();
  expect(stale.status).toBe(200);

  // The registry's alarm pushes what did not reach its object.
  await alarmAt(alarm);
  const gone = await chat("push-retry", [{ role: "user", content: "and now?" }]);
  expect(gone.status, await gone.clone().text()).toBe(404);
  await gone.text();
});

it("a change that did not reach its object is pushed again, and then answers as applied", async () => {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-again", deployments: [{ id: "sim-0", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  const { value: drained, alarm } = await unreachableObjects({ op: "set-state", group: "push-again", id: "sim-0", state: "draining" });
  expect(drained).toMatchObject({ ok: true, changed: ["push-again"], routing: "pending" });
  await alarmAt(alarm);
  // Pushed: the object knows the registry's revision, as a Worker's status read shows.
  const status = await env.MODEL_GROUP.getByName("push-again").status();
  expect(status.rev).toBe(drained.ok ? drained.rev : -1);
});

it("a drain sent again after \"pending\" pushes its group's object then: \"applied\" only once the object has it (found by review)", async () => {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-resent", deployments: [0, 1].map((i) => ({ id: `sim-${i}`, baseUrl: fleet[i] as string, model: UPSTREAM_MODEL })) } }), 201);
  const served = await chat("push-resent", [{ role: "user", content: "hello" }]);
  expect(served.status).toBe(200);
  await served.text();
  const { value: drained } = await withObjectsDown(async (r) => {
    const answer = await r.command({ op: "set-state", group: "push-resent", id: "sim-0", state: "draining" });
    // As after a few failed tries: the alarm's next one is a minute away, past the test's end.
    (r as unknown as { retryAt: number }).retryAt = Date.now() + 60_000;
    return answer;
  });
  expect(drained).toMatchObject({ ok: true, changed: ["push-resent"], routing: "pending" });
  // The operator sends the drain again, through the API, the object reachable now: it changes nothing in the fleet.
  const again = await ok<AdminResult>(admin("/admin/v1/groups/push-resent/deployments/sim-0/drain", { method: "POST" }));
  expect(again).toMatchObject({ ok: true, changed: [], routing: "applied" });
  // "applied": the object holds the drain, and new requests follow it.
  expect((await env.MODEL_GROUP.getByName("push-resent").status()).rev).toBe(drained.ok ? drained.rev : -1);
  for (let i = 0; i < 3; i++) {
    const next = await chat("push-resent", [{ role: "user", content: `after the drain ${i}` }]);
    await next.text();
    expect([next.status, next.headers.get("x-kvgate-backend")]).toEqual([200, "sim-1"]);
  }
});

it("a heartbeat renewal into a group whose push waits answers \"pending\", and leaves the push to the registry's retry", async () => {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-beat", deployments: [] } }), 201);
  const beat = { group: "push-beat", id: "beating", baseUrl: fleet[1] as string, model: UPSTREAM_MODEL, ttlSeconds: 3600 };
  const { value: registered, alarm } = await unreachableObjects({ op: "heartbeat", heartbeat: beat });
  expect(registered).toMatchObject({ ok: true, changed: ["push-beat"], routing: "pending" });
  // Renewals every few seconds from each server: none is a push (the retry's backoff holds), and none says the server is routed to.
  const renewed = await ok<AdminResult>(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
  expect(renewed).toMatchObject({ ok: true, changed: [], routing: "pending" });
  expect(await runInDurableObject(registry(), (_r, state) => state.storage.getAlarm())).toBe(alarm);
  await alarmAt(alarm);
  expect(await ok<AdminResult>(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY))).toMatchObject({ routing: "applied" });
});

it("a push that keeps failing is tried at 1 s, then 2, 4…; heartbeats in between put no try off", async () => {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-backoff", deployments: [{ id: "sim-0", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-backoff-beats", deployments: [] } }), 201);
  const first = await withObjectsDown((r) => r.command({ op: "set-state", group: "push-backoff", id: "sim-0", state: "draining" }));
  const at = Date.now();
  expect(first.value).toMatchObject({ routing: "pending" });
  expect(first.alarm).not.toBeNull();
  expect((first.alarm as number) - at).toBeLessThanOrEqual(1_000);
  // A server's heartbeats, each a command that pushes nothing: the try stays when it was.
  // (Another group's: one into this group would push this group again, and take its try.)
  const beat = { group: "push-backoff-beats", id: "beating", baseUrl: fleet[1] as string, model: UPSTREAM_MODEL, ttlSeconds: 3600 };
  for (let i = 0; i < 3; i++) await ok(admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY));
  expect(await runInDurableObject(registry(), (_r, state) => state.storage.getAlarm())).toBe(first.alarm);
  // Each try that fails waits twice as long for the next.
  const waits: number[] = [];
  let due = first.alarm as number;
  for (let i = 0; i < 3; i++) {
    const tried = await withObjectsDown(async (r) => {
      await new Promise((done) => setTimeout(done, Math.max(0, due - Date.now())));
      await r.alarm();
      return Date.now();
    });
    waits.push(Math.round(((tried.alarm as number) - tried.value) / 1000));
    due = tried.alarm as number;
  }
  expect(waits).toEqual([2, 4, 8]);
  // Once it goes through, no try is left: the alarm is the heartbeat's expiry, an hour away.
  await alarmAt(due);
  expect(((await runInDurableObject(registry(), (_r, state) => state.storage.getAlarm())) as number) - Date.now()).toBeGreaterThan(3_000_000);
}, 30_000);

it("a drain that did not reach its object is not drained while that object still routes to the server", async () => {
  const row = () => ok<DeploymentRow>(admin("/admin/v1/groups/push-drain/deployments/sim-0"));
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-drain", deployments: [{ id: "sim-0", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  const served = await chat("push-drain", [{ role: "user", content: "hello" }]);
  expect(served.status).toBe(200);
  await served.text();
  // Its release reaches the object in the isolate's next batch: nothing in flight before the drain.
  await vi.waitFor(async () => expect(await row()).toMatchObject({ state: "active", inFlight: 0 }), EVENTUALLY);

  const { value: drained, alarm } = await unreachableObjects({ op: "set-state", group: "push-drain", id: "sim-0", state: "draining" });
  expect(drained).toMatchObject({ ok: true, changed: ["push-drain"], routing: "pending" });
  // The object answers again but is not yet told: `drain --wait` must not say "safe to stop".
  expect(await row()).toMatchObject({ state: "draining", inFlight: 0, drained: false });
  // Which it is not: this isolate read the fleet before the drain, and the object still gives it sim-0.
  const stale = await chat("push-drain", [{ role: "user", content: "still there?" }]);
  await stale.text();
  expect(stale.status).toBe(200);
  expect(stale.headers.get("x-kvgate-backend")).toBe("sim-0");

  // Once the registry's alarm pushes the drain, the object no longer routes to it: drained.
  await alarmAt(alarm);
  await vi.waitFor(async () => expect(await row()).toMatchObject({ state: "draining", inFlight: 0, takesRequests: false, drained: true }), EVENTUALLY);
});

it("a registry reset while a drain's push waits on its object pushes the drain after the restart", async () => {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-reset", deployments: [{ id: "sim-0", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  const served = await chat("push-reset", [{ role: "user", content: "hello" }]);
  expect(served.status).toBe(200);
  await served.text();
  const { drainedRev, unpushed, alarm } = await runInDurableObject(registry(), async (instance: FleetRegistry, state) => {
    const own = instance as unknown as { env: Record<string, unknown> };
    const real = own.env;
    // The object is slow to answer; the registry is reset (a deploy, an eviction) before it does.
    const hung = { getByName: () => ({ install: () => new Promise(() => {}), retire: () => new Promise(() => {}) }) };
    own.env = { ...real, MODEL_GROUP: hung };
    void instance.command({ op: "set-state", group: "push-reset", id: "sim-0", state: "draining" });
    own.env = real;
    const drainedRev = instance.record("push-reset")?.rev;
    // The registry as it starts again from what it stored, and its alarm once due.
    const restarted = new FleetRegistry(state, env as never);
    const unpushed = state.storage.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'unpushed'").toArray()[0]?.v ?? "[]";
    const alarm = await state.storage.getAlarm();
    if (alarm !== null) {
      await state.storage.setAlarm(Date.now() + PARKED_MS);
      await new Promise((done) => setTimeout(done, Math.max(0, alarm - Date.now())));
      await restarted.alarm();
    }
    return { drainedRev, unpushed: JSON.parse(unpushed) as string[], alarm };
  });
  // The instance whose push never ended goes.
  await evictDurableObject(registry());
  expect(unpushed).toEqual(["push-reset"]);
  expect(alarm).not.toBeNull();
  expect((await env.MODEL_GROUP.getByName("push-reset").status()).rev).toBe(drainedRev);
});

it("a change's answer names its own revision, not one a command made while its push was under way", async () => {
  for (const name of ["push-rev-a", "push-rev-b"]) await ok(admin("/admin/v1/groups", { method: "POST", json: { name, deployments: [{ id: "sim-0", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  const { first, second, firstRev } = await runInDurableObject(registry(), async (instance: FleetRegistry) => {
    const own = instance as unknown as { env: typeof env };
    const real = own.env;
    // The first group's object answers its push only once the second command is answered.
    let release = () => {};
    const gate = new Promise<void>((done) => (release = done));
    const slow = (name: string) => {
      const object = real.MODEL_GROUP.getByName(name);
      if (name !== "push-rev-a") return object;
      const install = async (g: Parameters<typeof object.install>[0]) => {
        await gate;
        return object.install(g);
      };
      return { install, retire: (rev: number) => object.retire(rev) };
    };
    own.env = { ...real, MODEL_GROUP: { getByName: slow } as unknown as typeof env.MODEL_GROUP };
    try {
      const pending = instance.command({ op: "set-state", group: "push-rev-a", id: "sim-0", state: "draining" });
      const second = await instance.command({ op: "set-state", group: "push-rev-b", id: "sim-0", state: "draining" });
      release();
      return { first: await pending, second, firstRev: instance.record("push-rev-a")?.rev };
    } finally {
      own.env = real;
    }
  });
  expect(second).toMatchObject({ ok: true, routing: "applied" });
  // The revision a script carries into its next PATCH: the second's would slip past the 409 meant for it.
  expect(first).toMatchObject({ ok: true, rev: firstRev, routing: "applied" });
});

it("a push still under way is not sent again: a routing object slow to take its group gets one install, not one a second (found by review)", async () => {
  await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "push-slow", deployments: [{ id: "sim-0", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  const installs = await runInDurableObject(registry(), async (instance: FleetRegistry) => {
    const own = instance as unknown as { env: Record<string, unknown> };
    const real = own.env;
    let count = 0;
    // 2.5 s to take its group, as an object restoring its state may take.
    const slow = () => new Promise<undefined>((done) => setTimeout(() => done(undefined), 2_500));
    own.env = { ...real, MODEL_GROUP: { getByName: () => ({ install: () => (count++, slow()), retire: slow }) } };
    try {
      const drained = await instance.command({ op: "set-state", group: "push-slow", id: "sim-0", state: "draining" });
      expect(drained).toMatchObject({ ok: true, routing: "applied" });
      return count;
    } finally {
      own.env = real;
    }
  });
  expect(installs).toBe(1);
});
