import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { BackendSnapshot, GroupStatus, LeaseRelease, RouteDecision } from "../../src/routing/protocol.ts";
import { EVENTUALLY, firstRouteCall, groupConfig, routeCall } from "./gateway.ts";

/**
 * What feedback from the engines taught the routing object survives its eviction: it is saved
 * with the prefix-set snapshot and restored before the set, which it sizes.
 */

describe("learned figures", () => {
  it("are saved with the affinity snapshot and come back after the object is evicted", async () => {
    // The "durable" group's config (snapshot every 20 ms), in an object of its own.
    const g = groupConfig("durable");
    const stub = env.MODEL_GROUP.getByName("learned-restart");
    const status = () => runInDurableObject(stub, (o): GroupStatus => o.status());
    const chain = Array.from({ length: 300 }, (_, k) => 7_000_000 + k);
    // The engine keeps reporting nothing cached of a prompt the prefix set holds: it evicted it,
    // so the set is larger than its cache. Every release carries that report.
    let released: LeaseRelease[] = [];
    for (let i = 0; i < 12; i++) {
      const d = (await stub.route(i === 0 ? firstRouteCall(g, chain) : routeCall(g, chain, { released }))) as RouteDecision;
      released = [{ lease: d.lease, outcome: "ok", ttftMs: 40, streamed: true, usage: { prompt: 4800, completion: 4, cached: 0, cacheReported: true } }];
    }
    await stub.release(released, []);
    const learnedOf = (s: GroupStatus) => s.backends.find((b) => b.learned.capacitySteps > 0);
    const before = learnedOf(await status()) as BackendSnapshot;
    expect(before.learned.kvCapacityBlocks).toBeLessThan(before.learned.configured.kvCapacityBlocks);
    expect(before.prefixCapacity).toBe(before.learned.kvCapacityBlocks);

    // Saved by the alarm, snapshotIntervalMs (20 ms) after the last change: the learned capacity is
    // the snapshot's second-to-last number.
    const savedCapacities = () => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list<Float64Array>({ prefix: "affinity:" })).values()].map((v) => v[v.length - 2]));
    await vi.waitFor(async () => expect(await savedCapacities()).toContain(before.learned.kvCapacityBlocks), EVENTUALLY);
    await evictDurableObject(stub);

    const after = (await status()).backends.find((b) => b.id === before.id) as BackendSnapshot;
    expect(after.learned.kvCapacityBlocks).toBe(before.learned.kvCapacityBlocks);
    expect(after.learned.charsPerToken).toBe(before.learned.charsPerToken);
    expect(after.prefixCapacity).toBe(before.learned.kvCapacityBlocks);
    expect(after.prefixBlocks).toBe(300);
  });
});
