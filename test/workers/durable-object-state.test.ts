import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { ResolvedDeployment } from "../../src/config/load.ts";
import type { LimitRefusal, RouteDecision, RouteRefusal, VersionRefusal } from "../../src/routing/protocol.ts";
import { EVENTUALLY, firstRouteCall, groupConfig, routeCall, status } from "./gateway.ts";

/** The Durable Object's own state: what it stores, and the alarm that keeps it (issue 10 §4). */

function decided(d: RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal): RouteDecision {
  if ("refused" in d) throw new Error(`refused: ${d.refused}`);
  return d;
}

/** Bytes a stored value takes, near enough: typed arrays by their bytes, text as UTF-8, 8 a number. */
function storedBytes(v: unknown): number {
  if (ArrayBuffer.isView(v)) return v.byteLength;
  if (typeof v === "string") return new TextEncoder().encode(v).length;
  if (v === null || typeof v !== "object") return 8;
  let n = 0;
  for (const [k, x] of Object.entries(v)) n += k.length + storedBytes(x);
  return n;
}

/** A SQLite-backed Durable Object refuses a value over 2 MB in production (not enforced locally); kvgate keeps each under this. */
const PIECE_LIMIT = 128 * 1024;

describe("the affinity snapshot", () => {
  it("is stored in pieces of at most 128 KiB however many backends there are, and restored whole", async () => {
    const name = "many-backends";
    const g = groupConfig(name);
    const stub = env.MODEL_GROUP.getByName(name);
    // An 8,192-block prompt for each of the 80 backends, all in flight at once: each goes to the
    // backend with the least prompt work queued, so every backend learns one.
    const leases: string[] = [];
    for (let i = 0; i < g.deployments.length; i++) {
      const chain = Array.from({ length: 8192 }, (_, k) => (i + 1) * 10_000_000 + k);
      leases.push(decided(await stub.route(i === 0 ? firstRouteCall(g, chain) : routeCall(g, chain))).lease);
    }
    await stub.release(
      leases.map((lease) => ({ lease, outcome: "ok" as const })),
      [],
    );
    expect((await status(name)).backends.every((b) => b.prefixBlocks === 8192)).toBe(true);

    const stored = () => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list()).entries()].map(([key, v]) => ({ key, bytes: storedBytes(v) })));
    // The alarm saves it snapshotIntervalMs (20 ms) after the routing.
    await vi.waitFor(async () => expect((await stored()).filter((s) => s.key.startsWith("affinity:"))).toHaveLength(80), EVENTUALLY);
    const values = await stored();
    // As one value it would be past the limit.
    expect(values.reduce((n, s) => n + s.bytes, 0)).toBeGreaterThan(2 * 1024 * 1024);
    for (const s of values) expect(s.bytes, s.key).toBeLessThanOrEqual(PIECE_LIMIT);

    await evictDurableObject(stub);
    const after = await status(name);
    expect(after.restored.affinityBlocks).toBe(80 * 4096);
    expect(after.backends.every((b) => b.prefixBlocks === 4096)).toBe(true);
  });

  it("brings back a prefix set that holds a block hash twice (a collision) as it was, and it stays whole", async () => {
    const durable = groupConfig("durable");
    // One backend whose prefix set holds four blocks, in an object of its own.
    const g = { ...durable, version: `${durable.version}-collision`, deployments: [{ ...(durable.deployments[0] as ResolvedDeployment), kvCapacityBlocks: 4 }] };
    const stub = env.MODEL_GROUP.getByName("collision-restart");
    const [a, b, c1, c2, c3, x] = [9_100_001, 9_100_002, 9_100_003, 9_100_004, 9_100_005, 9_100_006];
    const routed = async (chain: number[], first = false) => {
      const d = decided(await stub.route(first ? firstRouteCall(g, chain) : routeCall(g, chain)));
      await stub.release([{ lease: d.lease, outcome: "ok" }], []);
    };
    const saved = () => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list<Float64Array>({ prefix: "affinity:" })).values()].map((v) => [...v]));
    // Its third block hashes as its first: a collision, which a client can search for offline.
    await routed([a, b, a], true);
    await vi.waitFor(async () => expect((await saved()).flat()).toContain(a), EVENTUALLY);
    await evictDurableObject(stub);
    // It was 2: the repeated hash was found where the first one was loaded and linked as a chain end,
    // though it had a child, and the child was in no list at all.
    expect((await stub.status()).backends[0]?.prefixBlocks).toBe(3);
    // Such a set went on to hang a block from a slot freed under its child: a cycle of parents, which
    // the next snapshot's walk up from the chain end followed without end.
    await routed([c1, c2, c3]);
    await routed([a, b, x]);
    await vi.waitFor(async () => expect((await saved()).flat()).toContain(x), EVENTUALLY);
    expect((await stub.status()).backends[0]?.prefixBlocks).toBe(4);
  });
});

describe("the alarm", () => {
  it("is set for a whole millisecond no earlier than the probe it is for, even after running early, and probes alone close a breaker", async () => {
    const name = "probed";
    const g = groupConfig(name);
    const stub = env.MODEL_GROUP.getByName(name);
    // Read in one turn of the object: the due time of the probe and the alarm it set for it.
    const alarmAndDue = () =>
      runInDurableObject(stub, async (o, state) => {
        const b = o.status().backends[0];
        return { state: b?.breaker.state, due: b?.nextProbeAt ?? null, alarm: await state.storage.getAlarm() };
      });
    const expectArmed = async () => {
      const { state, due, alarm } = await alarmAndDue();
      if (state === "closed") return;
      expect(due).not.toBeNull();
      expect(alarm).not.toBeNull();
      expect(Number.isInteger(alarm)).toBe(true);
      expect(alarm as number).toBeGreaterThanOrEqual(due as number);
    };
    // Two failures open its breaker; after that no request is sent, and openMs is 10 minutes.
    for (let i = 0; i < 2; i++) {
      const d = decided(await stub.route(i === 0 ? firstRouteCall(g, []) : routeCall(g, [])));
      await stub.release([{ lease: d.lease, outcome: "upstream-error" }], []);
    }
    const opened = await alarmAndDue();
    expect(opened.state).toBe("open");
    // Jittered: the probe's due time is not a whole millisecond, which the runtime's alarm is.
    expect(Number.isInteger(opened.due)).toBe(false);
    await expectArmed();
    // An alarm that runs before the probe is due finds nothing to do, and must set itself again.
    await runDurableObjectAlarm(stub);
    await expectArmed();
    await vi.waitFor(async () => expect((await status(name)).backends[0]?.breaker.state).toBe("closed"), EVENTUALLY);
    expect((await status(name)).backends[0]?.completed).toBe(0);
  });
});

describe("the object of a group the registry removed", () => {
  it("keeps no routing state in storage once its last lease ends, and writes none back when an old Worker calls it", async () => {
    const g = groupConfig("durable");
    const stub = env.MODEL_GROUP.getByName("retired-storage");
    const keys = () => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list()).keys()].sort());
    // Each backend learns a prompt; one lease is still in flight when the group goes.
    const leases: string[] = [];
    for (let i = 0; i < g.deployments.length; i++) {
      const chain = Array.from({ length: 64 }, (_, k) => 9_300_000 + i * 1000 + k);
      leases.push(decided(await stub.route(i === 0 ? firstRouteCall(g, chain) : routeCall(g, chain))).lease);
    }
    await stub.release(leases.slice(1).map((lease) => ({ lease, outcome: "ok" as const })), []);
    await vi.waitFor(async () => expect((await keys()).filter((k) => k.startsWith("affinity:"))).toHaveLength(g.deployments.length), EVENTUALLY);
    expect((await keys()).filter((k) => k.startsWith("view:"))).toHaveLength(1);

    await stub.retire(g.rev + 1);
    // The last lease ends unserved: its backend's prefix set takes the lesson back, and the breaker counts a failure.
    await stub.release([{ lease: leases[0] as string, outcome: "upstream-error" }], []);
    // A Worker that has not heard of the removal yet brings its version along: refused, nothing kept for it.
    const late = await stub.route(firstRouteCall(g, [9_300_001]));
    expect("refused" in late && late.refused).toBe("no-backend");
    await runDurableObjectAlarm(stub);
    expect(await keys()).toEqual(["retired"]);

    // Evicted, it comes back retired, with nothing to restore.
    await evictDurableObject(stub);
    const after = await stub.status();
    expect(after.restored.affinityBlocks).toBe(0);
    const again = await stub.route(firstRouteCall(g, [9_300_001]));
    expect("refused" in again && again.refused).toBe("no-backend");
    expect(await keys()).toEqual(["retired"]);

    // The registry adds the group again: it routes, and keeps its state, as before.
    await stub.install({ ...g, rev: g.rev + 2 });
    decided(await stub.route(routeCall(g, [9_300_001])));
    await vi.waitFor(async () => expect((await keys()).filter((k) => k.startsWith("affinity:"))).toHaveLength(1), EVENTUALLY);
    expect((await keys()).filter((k) => k.startsWith("view:"))).toHaveLength(1);
  });
});

describe("the object of a shard the group gave up, restarted while a request still runs there", () => {
  it("takes the request's lease back from its renewal, and does not hand its counts over while it may run", async () => {
    const g = groupConfig("durable");
    const stub = env.MODEL_GROUP.getByName("retired-restart");
    const keys = () => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list()).keys()].sort());
    const d = decided(await stub.route(firstRouteCall(g, [1, 2, 3])));
    await stub.retire(g.rev + 1);
    expect(await stub.handOver(), "a request still runs there").toBeNull();
    // A deploy (or an eviction) restarts it; the Worker renews the lease it holds, as its timer does every leaseTtlMs / 3.
    await evictDurableObject(stub);
    const answers = await stub.release([], [{ lease: d.lease, version: g.version, backendId: d.backendId }]);
    expect(answers.unheld, "the renewal of a lease it gave before the restart").toEqual([]);
    expect(await stub.status()).toMatchObject({ leases: 1, inFlightKnown: false, backends: expect.arrayContaining([expect.objectContaining({ id: d.backendId, inFlight: 1 })]) });
    expect(await stub.handOver(), "the request runs on").toBeNull();
    // It ends; another, of a Worker whose timer has not come yet, may still run until every lease had its leaseTtlMs.
    await stub.release([{ lease: d.lease, outcome: "ok" }], []);
    expect(await stub.handOver()).toBeNull();
    expect((await keys()).filter((k) => k.startsWith("view:")), "its version, for those renewals").toHaveLength(1);
  });

  it("hands its counts over, and forgets its versions, once its leases had their time to renew and none did", async () => {
    const g = groupConfig("short-lease");
    const stub = env.MODEL_GROUP.getByName("retired-restart-quiet");
    const keys = () => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list()).keys()].sort());
    decided(await stub.route(firstRouteCall(g, [1, 2, 3])));
    await stub.retire(g.rev + 1);
    // Its Worker was killed with the request: no renewal comes to the new instance, and no call at all.
    await evictDurableObject(stub);
    await vi.waitFor(async () => expect(await keys()).toEqual(["retired"]), EVENTUALLY);
    expect(await stub.handOver()).not.toBeNull();
  });
});

describe("a backend resting after a 429", () => {
  it("is still left alone after the object restarts, until its Retry-After is over", async () => {
    const g = groupConfig("durable");
    const stub = env.MODEL_GROUP.getByName("resting-restart");
    const first = decided(await stub.route(firstRouteCall(g, [])));
    // It asked for a minute's rest.
    await stub.release([{ lease: first.lease, outcome: "rate-limited", retryAfterMs: 60_000 }], []);
    const resting = first.backendId;
    // Its rest is saved with its breaker, a write that settles with the call.
    await evictDurableObject(stub);
    expect((await stub.status()).backends.find((b) => b.id === resting)?.restingUntil).not.toBeNull();
    // Eight requests held at once over four backends: least-loaded spreads them, and none goes to the one resting.
    const picked: string[] = [];
    for (let i = 0; i < 8; i++) picked.push(decided(await stub.route(routeCall(g, []))).backendId);
    expect(picked.filter((id) => id === resting)).toHaveLength(0);
  });
});
