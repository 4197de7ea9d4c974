import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { resolveGroup, type DeploymentState } from "../../src/config/resolve.ts";
import { backendKey } from "../../src/routing/backend.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import type { LeaseRelease, LimitRefusal, RouteDecision, RouteRefusal, RouteTenant, VersionRefusal } from "../../src/routing/protocol.ts";
import { dayOf } from "../../src/tenants/period.ts";

/**
 * One router, several config versions of its group at once (a deploy in progress): each call is
 * routed with its caller's version; state is shared per server (id and URL).
 */

const dep = (id: string, port = 9000 + Number(id.replace(/\D/g, "") || 0), extra: Record<string, unknown> = {}) => ({ id, baseUrl: `http://127.0.0.1:${port}`, model: "m", ...extra });

function version(deployments: ReturnType<typeof dep>[], over: Record<string, unknown> = {}): ResolvedGroup {
  const r = parseConfig({ modelGroups: [{ name: "g", strategy: "round-robin", breaker: { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 100 }, deployments, ...over }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

function decided(d: RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal): RouteDecision {
  if ("refused" in d) throw new Error(`refused: ${d.refused}`);
  return d;
}

/** The group as the fleet registry hands it out at revision `rev`. */
const at = (g: ResolvedGroup, rev: number): ResolvedGroup => ({ ...g, rev });
const byId = (r: GroupRouter) => Object.fromEntries(r.snapshot().map((b) => [b.id, b]));

describe("GroupRouter: config versions", () => {
  const old = version([dep("a1"), dep("b2"), dep("c3")]);
  // The next deploy drops b2, adds d4 and reorders.
  const next = version([dep("c3"), dep("d4"), dep("a1")]);

  it("routes each call with its caller's version, over the servers the newest version admits", () => {
    const r = new GroupRouter("g");
    r.install(old, 0);
    expect(r.route(next.version, [], [], 0)).toEqual({ refused: "unknown-version", rev: 0 });
    r.install(next, 0);
    const seen = { old: new Set<string>(), next: new Set<string>() };
    for (let i = 0; i < 12; i++) {
      const [name, g] = i % 2 === 0 ? (["old", old] as const) : (["next", next] as const);
      const d = decided(r.route(g.version, [], [], i));
      seen[name].add(d.backendId);
      r.release({ lease: d.lease, outcome: "ok" }, i);
    }
    // The old version's b2 is gone from the newest: a Worker still on the old one reaches it no more.
    expect([...seen.old].sort()).toEqual(["a1", "c3"]);
    expect([...seen.next].sort()).toEqual(["a1", "c3", "d4"]);
    expect(r.versions()).toEqual([next.version, old.version]);
    expect(r.snapshot().map((b) => [b.id, b.takesRequests])).toEqual([
      ["c3", true],
      ["d4", true],
      ["a1", true],
      ["b2", false],
    ]);
  });

  it("shares a server's in-flight count and breaker between the versions that name it", () => {
    const r = new GroupRouter("g");
    r.install(old, 0);
    r.install(next, 0);
    // Through the new version, a1 fails twice (the others excluded): its breaker opens for both.
    for (let i = 0; i < 2; i++) {
      const d = decided(r.route(next.version, [], ["c3", "d4"], 0));
      expect(d.backendId).toBe("a1");
      r.release({ lease: d.lease, outcome: "upstream-error" }, 1);
    }
    expect(byId(r).a1?.breaker.state).toBe("open");
    for (let i = 0; i < 3; i++) expect(decided(r.route(old.version, [], [], 2)).backendId).toBe("c3");
    for (let i = 0; i < 2; i++) expect(decided(r.route(next.version, [], ["d4"], 2)).backendId).toBe("c3");
    expect(byId(r).c3?.inFlight).toBe(5);
    expect(r.route(old.version, [], ["c3"], 2)).toEqual({ refused: "no-backend", rev: 0 });
  });

  it("takes a server under the same id at another URL for another server", () => {
    const moved = at(version([dep("a1", 9100), dep("b2")]), 2);
    const r = new GroupRouter("g");
    r.install(at(old, 1), 0);
    r.install(moved, 0);
    for (let i = 0; i < 2; i++) {
      const d = decided(r.route(moved.version, [], ["b2"], 0));
      r.release({ lease: d.lease, outcome: "upstream-error" }, 1);
    }
    const states = r.snapshot().filter((b) => b.id === "a1").map((b) => b.breaker.state);
    expect(states.sort()).toEqual(["closed", "open"]);
    // The fleet moves back (a later revision of the old content): the old a1 takes requests, its breaker its own.
    r.install(at(old, 3), 1);
    expect(decided(r.route(old.version, [], ["b2", "c3"], 2)).backendId).toBe("a1");
    expect(r.route(moved.version, [], ["b2"], 2)).toEqual({ refused: "no-backend", rev: 3 });
  });

  it("lets go of a version no call used lately, and of servers only it named once nothing is in flight there", () => {
    // A lease that outlives its version: renewed while the group's TTL was the new version's, longer, then its Worker went quiet.
    const next = version([dep("c3"), dep("d4"), dep("a1")], { leaseTtlMs: 600_000 });
    const r = new GroupRouter("g");
    r.install(old, 0);
    const held = decided(r.route(old.version, [], ["a1", "c3"], 0));
    expect(held.backendId).toBe("b2");
    r.install(next, 1);
    r.renew({ lease: held.lease, version: old.version, backendId: "b2" }, 1);
    // A minute later only the new version is used: the old one goes, b2 stays while its lease is held.
    decided(r.route(next.version, [], [], 61_001));
    expect(r.versions()).toEqual([next.version]);
    expect(r.takeDropped().versions).toEqual([old.version]);
    expect(r.snapshot().map((b) => b.id)).toEqual(["c3", "d4", "a1", "b2"]);
    r.release({ lease: held.lease, outcome: "ok" }, 61_001);
    expect(r.snapshot().map((b) => b.id)).toEqual(["c3", "d4", "a1"]);
    expect(r.takeDropped().backends).toHaveLength(1);
  });

  it("never keeps more than a few versions: the least recently used one goes", () => {
    const r = new GroupRouter("g");
    const versions = [1, 2, 3, 4, 5].map((n) => version([dep(`x${n}`)]));
    versions.forEach((g, i) => r.install(g, i));
    expect(r.versions()).toHaveLength(4);
    expect(r.knows((versions[0] as ResolvedGroup).version)).toBe(false);
  });
});

describe("GroupRouter: registry revisions", () => {
  const dep3 = [dep("a1"), dep("b2"), dep("c3")];
  /** b2 in `state`, as the registry resolves the group after a drain or a disable. */
  function withState(state: DeploymentState): ResolvedGroup {
    const { deployments, version: _v, rev: _r, ...settings } = version(dep3);
    return resolveGroup(settings, deployments.map((d) => (d.id === "b2" ? { ...d, state } : d)), 2);
  }

  it("a drain holds for every version: the drained server takes no new request, its leases finish", () => {
    const r = new GroupRouter("g");
    const before = at(version(dep3), 1);
    r.install(before, 0);
    const held = decided(r.route(before.version, [], ["a1", "c3"], 0));
    expect(held.backendId).toBe("b2");
    r.install(withState("draining"), 1);
    // A Worker that has not heard of the drain routes with the version before it: b2 is still out.
    for (let i = 0; i < 6; i++) {
      const d = decided(r.route(before.version, [], [], 2));
      expect(d.backendId).not.toBe("b2");
      expect(d.rev).toBe(2);
      r.release({ lease: d.lease, outcome: "ok" }, 2);
    }
    expect(r.route(before.version, [], ["a1", "c3"], 2)).toEqual({ refused: "no-backend", rev: 2 });
    expect(byId(r).b2?.inFlight).toBe(1);
    expect(byId(r).b2?.takesRequests).toBe(false);
    r.release({ lease: held.lease, outcome: "ok" }, 3);
    expect(byId(r).b2?.inFlight).toBe(0);
  });

  it("a version of a lower revision learnt later is not the newest", () => {
    const r = new GroupRouter("g");
    r.install(withState("disabled"), 0);
    r.install(at(version(dep3), 1), 1);
    expect(r.rev).toBe(2);
    expect(byId(r).b2?.takesRequests).toBe(false);
  });

  it("a retired group takes nothing new until a later revision brings it back", () => {
    const r = new GroupRouter("g");
    const g = at(version(dep3), 1);
    r.install(g, 0);
    r.retire(4);
    expect(r.route(g.version, [], [], 1)).toEqual({ refused: "no-backend", rev: 4 });
    r.retire(3);
    expect(r.rev).toBe(4);
    r.install(at(g, 5), 2);
    expect(decided(r.route(g.version, [], [], 2)).rev).toBe(5);
  });

  it("a retired group probes no server: a removed group's dead server is not called again and again", () => {
    const r = new GroupRouter("g", () => 0.5);
    const g = at(version(dep3), 1);
    r.install(g, 0);
    // a1's breaker opens (two failures), so it is probed until it answers.
    for (let i = 0; i < 2; i++) {
      const d = decided(r.route(g.version, [], ["b2", "c3"], i));
      r.release({ lease: d.lease, outcome: "upstream-error" }, i);
    }
    expect(r.dueProbes(1_000).map((p) => p.url)).toEqual(["http://127.0.0.1:9001/health"]);
    r.retire(4);
    expect(r.dueProbes(10_000)).toEqual([]);
    expect(r.nextWake()).toBeNull();
    // Brought back, its servers start afresh (below): a1's breaker is closed, and it takes requests again.
    r.install(at(g, 5), 20_000);
    expect(r.dueProbes(30_000)).toEqual([]);
    expect(byId(r).a1?.breaker.state).toBe("closed");
  });

  /** `r` routes `n` prompts of 20 blocks each with `outcome`, on whichever server (prefix-aware), and releases them. */
  function serve(r: GroupRouter, g: ResolvedGroup, n: number, now: number, outcome: "ok" | "upstream-error" = "ok") {
    for (let i = 0; i < n; i++) {
      const d = decided(r.route(g.version, Array.from({ length: 20 }, (_, k) => 1000 * (now + i) + k), [], now));
      r.release({ lease: d.lease, outcome, ttftMs: 50, durationMs: 100 }, now);
    }
  }
  const prefixAware = (deployments: ReturnType<typeof dep>[]) => version(deployments, { strategy: "prefix-aware" });

  it("a retired group brought back at a later revision starts its servers afresh: empty prefix sets, closed breakers, no rest; their counts go on", () => {
    // Shard 1 of a group of two: lowered to one shard at revision 5, raised to two again at 9 (the same slice, the same version).
    const r = new GroupRouter("g");
    const g = at(prefixAware([dep("a1")]), 1);
    r.install(g, 0);
    serve(r, g, 3, 0);
    serve(r, g, 2, 1, "upstream-error");
    expect(byId(r).a1).toMatchObject({ prefixBlocks: 60, breaker: { state: "open" } });
    const counted = r.metrics().backends.find((b) => b.id === "a1")?.outcomes;
    expect(counted).toMatchObject({ ok: 3, "upstream-error": 2 });
    r.retire(5);
    r.install(at(g, 9), 10_000);
    expect(byId(r).a1).toMatchObject({ prefixBlocks: 0, breaker: { state: "closed" }, restingUntil: null, inFlight: 0, takesRequests: true });
    serve(r, g, 1, 10_001);
    // GET /metrics counts on from where it was: the old counts are carried, the new ones added.
    const all = r.metrics().backends.filter((b) => b.id === "a1");
    expect(all.reduce((n, b) => n + b.outcomes.ok, 0)).toBe(4);
    expect(all.reduce((n, b) => n + b.outcomes["upstream-error"], 0)).toBe(2);
  });

  it("a server the newest version gave up starts afresh when a later one names it again; a deploy that kept it keeps its state", () => {
    const r = new GroupRouter("g");
    const both = at(prefixAware([dep("a1"), dep("b2")]), 1);
    r.install(both, 0);
    serve(r, both, 4, 0);
    // b2 asks to be spared for 30 s (a 429).
    const spared = decided(r.route(both.version, [], ["a1"], 1));
    r.release({ lease: spared.lease, outcome: "rate-limited", retryAfterMs: 30_000 }, 1);
    const had = byId(r);
    expect((had.a1?.prefixBlocks ?? 0) + (had.b2?.prefixBlocks ?? 0)).toBe(80);
    expect(had.b2?.restingUntil).toBe(30_001);
    // A deploy that keeps both (a setting changed): nothing starts afresh.
    const deploy = at(version([dep("a1"), dep("b2")], { strategy: "prefix-aware", balanceAbs: 40 }), 2);
    r.install(deploy, 1);
    expect(byId(r)).toMatchObject({ a1: { prefixBlocks: had.a1?.prefixBlocks }, b2: { prefixBlocks: had.b2?.prefixBlocks } });
    // b2 moves to another shard (revision 3), and back (revision 4) while the versions that named it are still held.
    r.install(at(prefixAware([dep("a1")]), 3), 2);
    r.takeDropped();
    r.install(at(deploy, 4), 3);
    expect(byId(r)).toMatchObject({ a1: { prefixBlocks: had.a1?.prefixBlocks }, b2: { prefixBlocks: 0, restingUntil: null, takesRequests: true } });
    // Its saved breaker and prefix set are deleted at once, not left for an object reset before the next snapshot to restore (found by review).
    expect(r.takeDropped().backends).toEqual([backendKey("b2", "http://127.0.0.1:9002")]);
  });
});

describe("GroupRouter: a server that starts afresh while a lease of its old state runs (found by review)", () => {
  it("keeps counting it: its ok count never falls, and its lease in flight is shown until it ends", () => {
    const r = new GroupRouter("g");
    const both = at(version([dep("a1"), dep("b2")]), 1);
    r.install(both, 0);
    const leases = Array.from({ length: 6 }, () => decided(r.route(both.version, [], [], 1)));
    const held = leases.find((d) => d.backendId === "b2") as RouteDecision;
    for (const d of leases) if (d !== held) r.release({ lease: d.lease, outcome: "ok", ttftMs: 5 }, 2);
    const okOf = () => r.metrics().backends.filter((b) => b.id === "b2").reduce((n, b) => n + (b.outcomes.ok ?? 0), 0);
    const inFlightOf = () => r.snapshot().filter((b) => b.id === "b2").reduce((n, b) => n + b.inFlight, 0);
    const before = okOf();
    expect(before).toBe(2);
    // b2 leaves (another shard) and comes back while its lease still runs.
    r.install(at(version([dep("a1")]), 2), 3);
    r.install(at(version([dep("a1"), dep("b2")]), 3), 4);
    expect(okOf()).toBe(before);
    expect(inFlightOf()).toBe(1);
    r.release({ lease: held.lease, outcome: "ok", ttftMs: 5 }, 5);
    expect(okOf()).toBe(before + 1);
    expect(inFlightOf()).toBe(0);
  });
});

describe("GroupRouter: lease renewals", () => {
  const g = version([dep("a1", 9001, { maxInFlight: 2 })], { leaseTtlMs: 300 });

  it("extends a renewed lease past its TTL; one not renewed expires", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const kept = decided(r.route(g.version, [], [], 0));
    decided(r.route(g.version, [], [], 0));
    r.renew({ lease: kept.lease, version: g.version, backendId: "a1" }, 200);
    expect(r.expire(300)).toBe(1);
    expect(byId(r).a1?.inFlight).toBe(1);
    expect(r.expire(499)).toBe(0);
    expect(r.expire(500)).toBe(1);
  });

  it("reclaims a lease at its TTL when a version with a longer TTL was let go: leases taken since do not wait behind older ones", () => {
    const long = version([dep("a1", 9001)], { leaseTtlMs: 300_000 });
    const short = version([dep("a1", 9001)], { leaseTtlMs: 30_000 });
    const r = new GroupRouter("g");
    r.install(long, 0);
    decided(r.route(long.version, [], [], 0));
    r.install(short, 1);
    // Taken while the long version is kept (its Workers renew every 100 s): the long TTL.
    decided(r.route(short.version, [], [], 70_000));
    // The long TTL after its last call only the short-TTL version is used: the long one goes (its
    // lease expired), and the lease taken since lives the short TTL from now.
    const later = decided(r.route(short.version, [], [], 300_000));
    expect(r.versions()).toEqual([short.version]);
    expect(r.nextWake()).toBe(330_000);
    expect(r.expire(330_000)).toBe(2);
    expect(byId(r).a1?.inFlight).toBe(0);
    expect(later.lease).toBeTypeOf("string");
  });

  it("after a restart takes back the slots its Workers still hold, so the cap holds again", () => {
    const before = new GroupRouter("g");
    before.install(g, 0);
    const leases = [0, 1].map(() => decided(before.route(g.version, [], [], 0)));
    // A new instance: nothing in flight, so it would take a third request on a backend capped at 2.
    const after = new GroupRouter("g");
    after.install(g, 10);
    for (const d of leases) after.renew({ lease: d.lease, version: g.version, backendId: d.backendId }, 100);
    expect(after.adopted).toBe(2);
    expect(byId(after).a1?.inFlight).toBe(2);
    expect(after.route(g.version, [], [], 100)).toEqual({ refused: "at-capacity", rev: 0 });
    // Released as usual: each slot once.
    for (const d of leases) {
      after.release({ lease: d.lease, outcome: "ok" }, 200);
      after.release({ lease: d.lease, outcome: "ok" }, 200);
    }
    expect(byId(after).a1?.inFlight).toBe(0);
  });

  it("does not take back a lease it released: a renewal that crossed the release on the way", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const d = decided(r.route(g.version, [], [], 0));
    r.release({ lease: d.lease, outcome: "ok" }, 10);
    r.renew({ lease: d.lease, version: g.version, backendId: "a1" }, 11);
    // And one released before its Worker's renewal reached a restarted object: released is released.
    r.release({ lease: "old-epoch.1", outcome: "ok" }, 12);
    r.renew({ lease: "old-epoch.1", version: g.version, backendId: "a1" }, 13);
    expect(byId(r).a1?.inFlight).toBe(0);
    expect(r.adopted).toBe(0);
  });

  it("counts a lease reclaimed at its expiry once, though a late renewal takes its slot back for the rest of its stream", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const d = decided(r.route(g.version, [], [], 0));
    // Its Worker's renewals did not get through in time (an object overloaded for longer than the TTL).
    expect(r.expire(300)).toBe(1);
    expect(byId(r).a1?.inFlight).toBe(0);
    // Its stream goes on: the late renewal takes the slot back, but it is no lease from before a restart.
    r.renew({ lease: d.lease, version: g.version, backendId: "a1" }, 400);
    expect(byId(r).a1?.inFlight).toBe(1);
    expect(r.adopted).toBe(0);
    r.release({ lease: d.lease, outcome: "ok", ttftMs: 5, durationMs: 450 }, 450);
    expect(byId(r).a1?.inFlight).toBe(0);
    const outcomes = r.metrics().backends.find((b) => b.id === "a1")?.outcomes;
    expect(outcomes).toMatchObject({ expired: 1, ok: 0 });

    // One taken back so that expires again (its Worker gone for good this time) is not counted again either.
    const e = decided(r.route(g.version, [], [], 500));
    expect(r.expire(800)).toBe(1);
    r.renew({ lease: e.lease, version: g.version, backendId: "a1" }, 900);
    expect(r.expire(1200)).toBe(1);
    expect(byId(r).a1?.inFlight).toBe(0);
    expect(r.metrics().backends.find((b) => b.id === "a1")?.outcomes).toMatchObject({ expired: 2, ok: 0 });
  });

  it("ignores a renewal of a version or backend it does not know", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    r.renew({ lease: "x.1", version: "unknown", backendId: "a1" }, 0);
    r.renew({ lease: "x.2", version: g.version, backendId: "nope" }, 0);
    expect(r.leaseCount).toBe(0);
  });
});

describe("GroupRouter: the usage of a release for a lease it does not know", () => {
  const pricing = { promptUsdPerMillion: 2, cachedPromptUsdPerMillion: 1, completionUsdPerMillion: 4 };
  const g = version([dep("a1", 9001, { maxInFlight: 4 })], { leaseTtlMs: 300, pricing });
  const tenant = (over: Partial<RouteTenant> = {}): RouteTenant => ({ id: "key_a", rpm: null, tpm: null, maxParallel: null, budget: null, admitted: false, ...over });
  const usage = { prompt: 100, completion: 20, cached: 40 };
  const row = { key: "key_a", day: dayOf(0), model: "g", backend: "a1", promptTokens: 100, completionTokens: 20, cachedTokens: 40, requests: 1, costMicros: 60 * 2 + 40 * 1 + 20 * 4 };

  it("records it once for its key and backend after a restart, and gives back no slot it does not hold", () => {
    const before = new GroupRouter("g");
    before.install(g, 0);
    const d = decided(before.route(g.version, [], [], 0, tenant()));
    // A new instance (an eviction, a deploy) before any renewal of the lease reached it.
    const after = new GroupRouter("g");
    after.install(g, 10);
    const held = decided(after.route(g.version, [], [], 10));
    const release: LeaseRelease = { lease: d.lease, outcome: "ok", usage, key: "key_a", backendId: "a1" };
    after.release(release, 20);
    // Again, as a Worker sends it once more after a call that failed on its way back: counted once.
    after.release(release, 21);
    expect(after.ledger.takeBatch()?.rows).toEqual([row]);
    // Its outcome is no backend's: the slot it held is not this instance's to give back.
    expect(byId(after).a1).toMatchObject({ inFlight: 1, completed: 0 });
    after.release({ lease: held.lease, outcome: "ok" }, 30);
    expect(byId(after).a1).toMatchObject({ inFlight: 0, completed: 1 });
  });

  it("records it after the lease expired, and the key's other lease still counts in flight", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const expired = decided(r.route(g.version, [], [], 0, tenant()));
    decided(r.route(g.version, [], [], 200, tenant()));
    expect(r.expire(300)).toBe(1);
    r.release({ lease: expired.lease, outcome: "ok", usage, key: "key_a", backendId: "a1" }, 310);
    expect(r.ledger.takeBatch()?.rows).toEqual([row]);
    // One of the key's leases is still in flight: a second is over max_parallel 1.
    expect(r.route(g.version, [], [], 320, tenant({ maxParallel: 1 }))).toMatchObject({ refused: "limited", limit: "parallel" });
  });
});

describe("GroupRouter: a held lease's usage, charged by its renewals as it goes", () => {
  const g = version([dep("a1", 9001, { maxInFlight: 4 })], { leaseTtlMs: 1000 });
  const budget = (tokens: number) => ({ tokens, costMicros: null, period: "total" as const, spent: { period: "total", tokens: 0, costMicros: 0 } });
  const tenant = (): RouteTenant => ({ id: "key_a", rpm: null, tpm: null, maxParallel: null, budget: budget(50), admitted: false });
  const soFar = (completion: number) => ({ prompt: 10, completion, cached: 0 });
  // The tenants object stores each batch and answers the key's spend: all the batches so far.
  let stored = 0;
  const charged = (r: GroupRouter) => {
    const rows = r.ledger.takeBatch()?.rows ?? [];
    stored += rows.reduce((n, x) => n + x.promptTokens + x.completionTokens, 0);
    r.ledger.sent({ key_a: { period: "total", tokens: stored, costMicros: 0 } });
    return rows.map((x) => [x.promptTokens, x.completionTokens, x.requests]);
  };

  it("charges each renewal what the lease used past the last, once however often it comes, and its release the rest", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const d = decided(r.route(g.version, [], [], 0, tenant()));
    const renewal = { lease: d.lease, version: g.version, backendId: "a1", key: "key_a", budget: budget(50) };
    expect(r.renew({ ...renewal, usage: soFar(20) }, 10)).toBe("held");
    // The same again (a flush whose answer was lost), and one that came late, after a later one: nothing more.
    r.renew({ ...renewal, usage: soFar(20) }, 11);
    expect(charged(r)).toEqual([[10, 20, 0]]);
    r.renew({ ...renewal, usage: soFar(30) }, 20);
    r.renew({ ...renewal, usage: soFar(25) }, 21);
    expect(charged(r)).toEqual([[0, 10, 0]]);
    // 10 + 30 + 15 reach the 50: the renewal is answered that the key's budget is spent.
    expect(r.renew({ ...renewal, usage: soFar(45) }, 30)).toBe("spent");
    r.release({ lease: d.lease, outcome: "client-abort", usage: soFar(48), key: "key_a", backendId: "a1" }, 40);
    // 15 charged by the last renewal, the 3 left, and the request: it spent tokens, though the gateway ended it.
    expect(charged(r)).toEqual([[0, 18, 1]]);
    expect(r.route(g.version, [], [], 50, tenant())).toMatchObject({ refused: "limited", limit: "budget" });
  });

  it("after a restart, charges what no object answered charging: a renewal's usage past its `charged`, and a release's", () => {
    stored = 0;
    const before = new GroupRouter("g");
    before.install(g, 0);
    const d = decided(before.route(g.version, [], [], 0, tenant()));
    const renewal = { lease: d.lease, version: g.version, backendId: "a1", key: "key_a" };
    before.renew({ ...renewal, usage: soFar(20) }, 5);
    expect(charged(before)).toEqual([[10, 20, 0]]);
    // A new instance (an eviction, a deploy). The Worker's charge of 30 was lost on its way: the 20 was answered.
    const after = new GroupRouter("g");
    after.install(g, 10);
    after.renew({ ...renewal, usage: soFar(30), charged: soFar(20) }, 20);
    after.release({ lease: d.lease, outcome: "ok", usage: soFar(36), key: "key_a", backendId: "a1", charged: soFar(30) }, 30);
    expect(charged(after)).toEqual([[0, 16, 1]]);
  });

  it("says a renewal it cannot take back is not held, and charges nothing it carried: its Worker does not count that charge made", () => {
    stored = 0;
    const r = new GroupRouter("g");
    r.install(g, 0);
    // A version this object has not learned yet (it restarted, and no call brought the config since).
    expect(r.renew({ lease: "other.1", version: "unknown", backendId: "a1", key: "key_a", usage: soFar(20) }, 10)).toBe("unheld");
    expect(r.ledger.takeBatch()).toBeNull();
  });

  it("charges a release its object does not hold (restarted before any renewal, or the lease expired) what no object answered charging", () => {
    stored = 0;
    const before = new GroupRouter("g");
    before.install(g, 0);
    const d = decided(before.route(g.version, [], [], 0, tenant()));
    before.renew({ lease: d.lease, version: g.version, backendId: "a1", key: "key_a", usage: soFar(20) }, 5);
    expect(charged(before)).toEqual([[10, 20, 0]]);
    const after = new GroupRouter("g");
    after.install(g, 10);
    after.release({ lease: d.lease, outcome: "ok", usage: soFar(26), key: "key_a", backendId: "a1", charged: soFar(20) }, 30);
    expect(charged(after)).toEqual([[0, 6, 1]]);
    // All of it charged before: the request still counts.
    const again = decided(after.route(g.version, [], [], 40, tenant()));
    expect(after.expire(2000)).toBe(1);
    after.release({ lease: again.lease, outcome: "ok", usage: soFar(5), key: "key_a", backendId: "a1", charged: soFar(5) }, 2010);
    expect(charged(after)).toEqual([[0, 0, 1]]);
  });
});

describe("GroupRouter: a key whose usage is not recorded (track_usage false, no tpm or budget)", () => {
  const g = version([dep("a1", 9001, { maxInFlight: 4 })], { leaseTtlMs: 1000 });
  const quiet: RouteTenant = { id: "key_quiet", rpm: null, tpm: null, maxParallel: 1, budget: null, admitted: false, recordsUsage: false };
  // Read for routing's feedback (a sampled request), not for the key.
  const usage = { prompt: 100, completion: 20, cached: 40, cacheReported: true };
  const tokensOf = (r: GroupRouter) => r.metrics().keys.find((k) => k.id === quiet.id);

  it("charges it nothing of a release's usage, which teaches routing all the same; its request still counts", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const d = decided(r.route(g.version, [], [], 0, quiet));
    r.release({ lease: d.lease, outcome: "ok", usage }, 10);
    expect(r.ledger.takeBatch()).toBeNull();
    expect(tokensOf(r)).toMatchObject({ requests: 1, tokens: { prompt: 0, completion: 0, cached: 0 } });
    // The backend counts it as any answer's.
    expect(byId(r).a1).toMatchObject({ completed: 1, usage: { prompt: 100, cached: 40 } });
    // Its slot is given back: max_parallel 1 admits the next.
    expect(decided(r.route(g.version, [], [], 20, quiet)).backendId).toBe("a1");
  });

  it("charges it nothing for a lease taken back from its renewal after a restart, with usage or without", () => {
    const before = new GroupRouter("g");
    before.install(g, 0);
    const sampled = decided(before.route(g.version, [], [], 0, quiet));
    const plain = decided(before.route(g.version, [], [], 0, { ...quiet, maxParallel: null }));
    const after = new GroupRouter("g");
    after.install(g, 10);
    for (const d of [sampled, plain]) after.renew({ lease: d.lease, version: g.version, backendId: "a1", key: quiet.id, recordsUsage: false }, 20);
    // The key's leases count in flight here again.
    expect(after.route(g.version, [], [], 25, { ...quiet, maxParallel: 2 })).toMatchObject({ refused: "limited", limit: "parallel" });
    after.release({ lease: sampled.lease, outcome: "ok", usage }, 30);
    after.release({ lease: plain.lease, outcome: "ok" }, 30);
    expect(after.ledger.takeBatch()).toBeNull();
    expect(tokensOf(after)?.tokens ?? { prompt: 0 }).toMatchObject({ prompt: 0 });
  });

  it("still records a key whose renewal says nothing of it (a Worker of an earlier release): as before, its usage is its key's", () => {
    const before = new GroupRouter("g");
    before.install(g, 0);
    const d = decided(before.route(g.version, [], [], 0, { ...quiet, recordsUsage: undefined }));
    const after = new GroupRouter("g");
    after.install(g, 10);
    after.renew({ lease: d.lease, version: g.version, backendId: "a1", key: quiet.id }, 20);
    after.release({ lease: d.lease, outcome: "ok" }, 30);
    expect(after.ledger.takeBatch()?.rows.map((x) => [x.key, x.requests])).toEqual([[quiet.id, 1]]);
  });
});

describe("GroupRouter: a key's max_parallel and leases past their TTL", () => {
  const g = version([dep("a1", 9001, { maxInFlight: 4 })], { leaseTtlMs: 300 });
  const tenant: RouteTenant = { id: "key_a", rpm: null, tpm: null, maxParallel: 1, budget: null, admitted: false };

  it("counts no lease the Worker lost once its TTL ran out, though the alarm that reclaims it has not run yet", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    // Taken, and never released or renewed: the Worker that held it is gone.
    decided(r.route(g.version, [], [], 0, tenant));
    expect(r.route(g.version, [], [], 100, tenant)).toMatchObject({ refused: "limited", limit: "parallel" });
    // Past its TTL, with no alarm in between: the key's one slot is free again.
    expect(decided(r.route(g.version, [], [], 400, tenant)).backendId).toBe("a1");
  });
});

describe("GroupRouter: a backend learns a prompt only from a request it served", () => {
  const g = version([dep("a1"), dep("b2")], { strategy: "prefix-aware", hotThreshold: 0 });
  const prompt = Array.from({ length: 20 }, (_, i) => 7_000 + i);

  it.each([
    ["upstream-error", 0],
    ["rejected", 0],
    ["rate-limited", 0],
    ["ok", 20],
    ["client-abort", 20],
  ] as const)("%s: the same prompt then matches %i blocks there", (outcome, matched) => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const first = decided(r.route(g.version, prompt, [], 0));
    r.release({ lease: first.lease, outcome }, 1);
    expect(byId(r)[first.backendId]?.prefixBlocks).toBe(matched);
    const again = decided(r.route(g.version, prompt, [], 1000));
    expect(again.matched).toBe(matched);
  });

  it("keeps what a request served since taught: the shared part of a failed prompt stays", () => {
    const r = new GroupRouter("g");
    r.install(g, 0);
    const failing = decided(r.route(g.version, prompt, [], 0));
    // A burst: the same prompt again, while the first is in flight, goes where it is cached.
    const same = decided(r.route(g.version, [...prompt, 1], ["b2", "a1"].filter((x) => x !== failing.backendId), 0));
    expect(same.backendId).toBe(failing.backendId);
    expect(same.matched).toBe(20);
    r.release({ lease: same.lease, outcome: "ok" }, 1);
    r.release({ lease: failing.lease, outcome: "rejected" }, 2);
    expect(byId(r)[failing.backendId]?.prefixBlocks).toBe(21);
  });
});

describe("GroupRouter: the prefix budget", () => {
  it("shares the group's budget out by kvCapacityBlocks, over every version's servers", () => {
    const r = new GroupRouter("g");
    const a = version([dep("a1", 9001, { kvCapacityBlocks: 3000 }), dep("b2", 9002, { kvCapacityBlocks: 1000 })], { prefixBudgetBlocks: 2000 });
    r.install(a, 0);
    expect(r.snapshot().map((b) => b.prefixCapacity)).toEqual([1500, 500]);
    const b = version([dep("c3", 9003, { kvCapacityBlocks: 4000 })], { prefixBudgetBlocks: 2000 });
    r.install(b, 0);
    expect(r.snapshot().map((x) => [x.id, x.prefixCapacity])).toEqual([
      ["c3", 1000],
      ["a1", 750],
      ["b2", 250],
    ]);
  });
});
