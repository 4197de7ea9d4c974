import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { MAX_DEPLOYMENTS } from "../../src/config/schema.ts";
import { DecisionRing } from "../../src/metrics/decisions.ts";
import { metricFamilies } from "../../src/metrics/group-metrics.ts";
import { packKeys, unpackKeys } from "../../src/metrics/key-columns.ts";
import { scrapedGroup } from "../../src/sharding/merge.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import type { RouteDecision, RouteTenant } from "../../src/routing/protocol.ts";

function group(over: Record<string, unknown> = {}): ResolvedGroup {
  const deployments = [0, 1].map((i) => ({ id: `b${i}`, baseUrl: `http://127.0.0.1:${9001 + i}`, model: "m", maxInFlight: 8 }));
  const r = parseConfig({ modelGroups: [{ name: "g", blockChars: 64, deployments, ...over }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

const chain = (prefix: number, n: number) => Array.from({ length: n }, (_, i) => prefix * 1_000_000 + i);

function decided(d: ReturnType<GroupRouter["route"]>): RouteDecision {
  if ("refused" in d) throw new Error(`refused: ${d.refused}`);
  return d;
}

const key = (id: string, over: Partial<RouteTenant> = {}): RouteTenant => ({ id, rpm: null, tpm: null, maxParallel: null, budget: null, admitted: false, ...over });

describe("GroupRouter: the counters GET /metrics renders", () => {
  it("counts decisions by reason (a retry as failover), outcomes, latencies, tokens and predicted cached tokens", () => {
    const g = group({ leaseTtlMs: 1000 });
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    const first = decided(r.route(g.version, chain(1, 4), [], 0));
    // The same prompt again, once prefilled: a prefix hit on the same backend, 4 blocks of 64 chars = 64 tokens predicted.
    const hit = decided(r.route(g.version, chain(1, 4), [], 100));
    expect(hit.reason).toBe("prefix-hit");
    expect(hit.backendId).toBe(first.backendId);
    r.release({ lease: first.lease, outcome: "upstream-error" }, 2);
    const retry = decided(r.route(g.version, chain(1, 4), [first.backendId], 3));
    const fellBack = decided(r.route(g.version, chain(2, 4), [], 3, undefined, true));
    r.release({ lease: hit.lease, outcome: "ok", ttftMs: 250, durationMs: 2000, usage: { prompt: 100, completion: 10, cached: 60 } }, 4);
    r.release({ lease: retry.lease, outcome: "ok", ttftMs: 40, durationMs: 40 }, 5);
    expect(r.expire(10_000)).toBe(1);

    const m = r.metrics();
    const on = (id: string) => m.backends.find((b) => b.id === id);
    const a = on(first.backendId);
    const other = on(retry.backendId);
    expect(retry.backendId).not.toBe(first.backendId);
    expect(a?.reasons).toEqual({ [first.reason]: 1, "prefix-hit": 1, ...(fellBack.backendId === first.backendId ? { failover: 1 } : {}) });
    expect(other?.reasons.failover).toBe(fellBack.backendId === first.backendId ? 1 : 2);
    expect(a?.outcomes).toMatchObject({ "upstream-error": 1, ok: 1 });
    expect(a?.ttft).toMatchObject({ count: 1, sum: 0.25 });
    expect(a?.duration).toMatchObject({ count: 1, sum: 2 });
    expect(a?.tokens).toEqual({ prompt: 100, completion: 10, cached: 60, predictedCached: 64, leases: 1 });
    expect(other?.ttft.count).toBe(1);
    expect(other?.tokens.leases).toBe(0);
    expect(m.backends.reduce((n, b) => n + b.outcomes.expired, 0)).toBe(1);
    expect(m.backends.every((b) => b.inFlight === 0)).toBe(true);
    expect(a?.prefix.entries).toBeGreaterThan(0);
    expect(a?.prefix.bytes).toBeGreaterThanOrEqual((a?.prefix.entries ?? 0) * 28);
  });

  it("carries the counts of a deployment that moved to another shard's object once it lets it go, while the group has it", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    const d = decided(r.route(g.version, chain(1, 4), [], 0));
    r.release({ lease: d.lease, outcome: "ok", ttftMs: 10 }, 1);
    // The group went to two shards: this object's slice is the other deployment; the version that named both is let go.
    const moved = d.backendId;
    const slice: ResolvedGroup = { ...g, deployments: g.deployments.filter((x) => x.id !== moved), version: "slice", rev: 1 };
    r.install(slice, 2);
    r.dropIdleViews(10 * 60_000);
    expect(r.snapshot().map((b) => b.id)).not.toContain(moved);
    const carried = () => r.metrics().backends.find((b) => b.id === moved);
    expect(carried()).toMatchObject({ current: false, inFlight: 0, outcomes: { ok: 1 }, ttft: { count: 1 } });
    // A caller whose fleet is behind this object's revision, or still has the deployment, keeps it.
    expect(r.metrics({ rev: 0, ids: [] }).backends.some((b) => b.id === moved)).toBe(true);
    expect(r.metrics({ rev: 1, ids: g.deployments.map((x) => x.id) }).backends.some((b) => b.id === moved)).toBe(true);
    // One whose group no longer has it: its counts go, with its series.
    expect(r.metrics({ rev: 1, ids: slice.deployments.map((x) => x.id) }).backends.some((b) => b.id === moved)).toBe(false);
    expect(carried()).toBeUndefined();
  });

  it("carries at most MAX_DEPLOYMENTS let-go ids: an object no one scrapes, whose servers take a new id at each restart, keeps no more", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    const base = g.deployments[0] as ResolvedGroup["deployments"][number];
    const n = MAX_DEPLOYMENTS + 10;
    for (let i = 0; i < n; i++) {
      const id = `pod-${i}`;
      r.install({ ...g, deployments: [{ ...base, id, baseUrl: `http://10.0.${i >> 8}.${i & 255}:8000` }], version: `v${i}`, rev: i }, i);
      r.dropIdleViews(i + 10 * 60_000);
    }
    const ids = r.metrics().backends.map((b) => b.id);
    expect(ids.length).toBeLessThanOrEqual(MAX_DEPLOYMENTS + 1);
    // The newest stay; the longest-kept went first.
    expect(ids).toContain(`pod-${n - 2}`);
    expect(ids).not.toContain("pod-0");
  });

  it("counts breaker transitions by the state entered, and refusals", () => {
    const g = group({ breaker: { consecutiveFailures: 1, openMs: 100, closeAfterSuccesses: 1 } });
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    for (const at of [0, 1]) {
      const d = decided(r.route(g.version, [], [], at));
      r.release({ lease: d.lease, outcome: "upstream-error" }, at);
    }
    expect(r.route(g.version, [], [], 2)).toMatchObject({ refused: "no-backend" });
    // Past openMs, the route call finds both half-open; a trial closes one.
    const trial = decided(r.route(g.version, [], [], 200));
    r.release({ lease: trial.lease, outcome: "ok" }, 201);
    const m = r.metrics();
    const t = m.backends.find((b) => b.id === trial.backendId);
    expect(t?.breakerTransitions).toEqual({ open: 1, "half-open": 1, closed: 1 });
    expect(t?.breaker).toBe("closed");
    const other = m.backends.find((b) => b.id !== trial.backendId);
    expect(other?.breaker).toBe("half-open");
    expect(other?.breakerTransitions).toEqual({ open: 1, "half-open": 1, closed: 0 });
    expect(m.refusals).toEqual({ "no-backend": 1, "at-capacity": 0 });
  });

  it("counts a virtual key's requests once per request, its tokens, and its limit hits by limit", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    const k = key("key_a", { rpm: 2 });
    const one = decided(r.route(g.version, [], [], 0, k));
    const again = decided(r.route(g.version, [], [one.backendId], 1, { ...k, admitted: true }));
    const two = decided(r.route(g.version, [], [], 2, k));
    expect(r.route(g.version, [], [], 3, k)).toMatchObject({ refused: "limited", limit: "rpm" });
    r.release({ lease: again.lease, outcome: "ok", usage: { prompt: 7, completion: 3, cached: 2 } }, 4);
    r.release({ lease: two.lease, outcome: "ok", usage: { prompt: 5, completion: 1, cached: 0 } }, 4);
    expect(r.metrics().keys).toEqual([{ id: "key_a", requests: 2, tokens: { prompt: 12, completion: 4, cached: 2 }, estimated: 0, limitHits: { rpm: 1 } }]);
  });

  it("in a fallback group, checks and takes a key's limits for a request another group counted, and counts it only when no group gave it a backend before", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    const k = key("key_f", { rpm: 2 });
    // Failed over from its primary, which counted it: its rpm here all the same.
    decided(r.route(g.version, [], [], 0, { ...k, counted: true }, true));
    // Its primary had no backend for it: this group is the first to give it one.
    decided(r.route(g.version, [], [], 1, { ...k, counted: false }, true));
    expect(r.route(g.version, [], [], 2, { ...k, counted: true }, true)).toMatchObject({ refused: "limited", limit: "rpm" });
    expect(r.metrics().keys).toEqual([expect.objectContaining({ id: "key_f", requests: 1, limitHits: { rpm: 1 } })]);
  });

  it("charges a key an estimate for an answer whose usage never came: its prompt's characters over the backend's characters per token, a token an event", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    const k = key("key_e");
    // 640 characters at the default 4 characters a token, and 6 token ids: 166 prompt tokens.
    const left = decided(r.route(g.version, chain(1, 10), [], 0, k));
    r.release({ lease: left.lease, outcome: "client-abort", estimate: { chars: 640, tokens: 6, events: 25 } }, 1);
    // The upstream's usage, when it came, is what counts.
    const reported = decided(r.route(g.version, chain(2, 10), [], 2, k));
    r.release({ lease: reported.lease, outcome: "client-abort", usage: { prompt: 7, completion: 3, cached: 0 }, estimate: { chars: 640, tokens: 0, events: 99 } }, 3);
    // A release the object no longer holds (it restarted, or the lease expired) is charged by its key and backend.
    r.release({ lease: "gone", outcome: "ok", estimate: { chars: 320, tokens: 0, events: 4 }, key: "key_e", backendId: "b0" }, 4);
    // One that no count could be is not charged.
    const bad = decided(r.route(g.version, chain(3, 10), [], 5, k));
    r.release({ lease: bad.lease, outcome: "client-abort", estimate: { chars: 1.5, tokens: 0, events: -1 } }, 6);
    expect(r.metrics().keys).toEqual([{ id: "key_e", requests: 3, tokens: { prompt: 166 + 7 + 80, completion: 25 + 3 + 4, cached: 0 }, estimated: 2, limitHits: {} }]);
  });
});

describe("DecisionRing", () => {
  it("keeps the last decisions newest first, fills in each one's outcome, and lets a written-over one be", () => {
    const ring = new DecisionRing(3);
    const seqs = [1, 2, 3, 4].map((i) => ring.add(i * 1000, `b${i}`, "least-loaded", i, 10));
    ring.ended(seqs[3] as number, "ok", 12.5);
    ring.ended(seqs[0] as number, "ok", 99);
    const list = ring.list();
    expect(list.map((d) => d.backend)).toEqual(["b4", "b3", "b2"]);
    expect(list[0]).toEqual({ at: new Date(4000).toISOString(), backend: "b4", reason: "least-loaded", matched: 4, total: 10, outcome: "ok", ttft_ms: 12.5 });
    expect(list.slice(1).every((d) => d.outcome === null && d.ttft_ms === null)).toBe(true);
    expect(new DecisionRing(3).list()).toEqual([]);
  });
});

describe("metricFamilies", () => {
  it("names every family once, with group and backend (or key) labels", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    decided(r.route(g.version, [], [], 0, key("key_a")));
    const families = metricFamilies([scrapedGroup("g", [r.metrics()], ["g"], false, 1)], ["gone"]);
    const names = families.map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    for (const f of families) expect(f.name).toMatch(/^kvgate_[a-z_]+$/);
    for (const f of families.filter((x) => x.type === "counter")) expect(f.name.endsWith("_total")).toBe(true);
    const inFlight = families.find((f) => f.name === "kvgate_requests_in_flight");
    expect(inFlight?.samples).toEqual([
      { labels: { group: "g", backend: "b0" }, value: 1 },
      { labels: { group: "g", backend: "b1" }, value: 0 },
    ]);
    expect(families.find((f) => f.name === "kvgate_group_up")?.samples).toEqual([
      { labels: { group: "g" }, value: 1 },
      { labels: { group: "gone" }, value: 0 },
    ]);
    expect(families.find((f) => f.name === "kvgate_key_requests_total")?.samples).toEqual([{ labels: { group: "g", key: "key_a" }, value: 1 }]);
  });
});

describe("GroupRouter: the counts of a shard's object the group gave up", () => {
  it("are handed over only once it is retired and nothing is in flight there, and carried by the object that adopts them", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    const held = decided(r.route(g.version, chain(1, 4), [], 0, key("key_a")));
    expect(r.handOver(0)).toBeNull(); // not retired: it still routes
    r.retire(g.rev + 1);
    expect(r.handOver(0)).toBeNull(); // a request still in flight
    r.release({ lease: held.lease, outcome: "ok" }, 5);
    const handed = r.handOver(5);
    expect(handed?.backends.find((b) => b.id === held.backendId)).toMatchObject({ current: false, inFlight: 0, outcomes: { ok: 1 } });
    expect(handed?.keys.map((k) => k.id)).toEqual(["key_a"]);

    const own = new GroupRouter("g", () => 0.5);
    own.install(g, 0);
    own.adopt([{ object: "g\u001f1", metrics: handed as NonNullable<typeof handed> }]);
    expect(own.metrics().handedOver).toEqual([{ object: "g\u001f1", metrics: handed }]);
    // A deployment the group no longer has goes from the copy as from the object's own series.
    expect(own.metrics({ rev: g.rev + 1, ids: [] }).handedOver?.[0]?.metrics.backends).toEqual([]);
  });

  it("are not handed over for leaseTtlMs after the object restarted: a request it does not know of yet may run there", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    // Its earlier incarnation saved that leases may run well past that: each renews within leaseTtlMs.
    r.restarted(0, 10 * g.leaseTtlMs);
    r.retire(g.rev + 1);
    expect(r.handOver(g.leaseTtlMs - 1)).toBeNull();
    expect(r.handOver(g.leaseTtlMs)).not.toBeNull();
  });

  it("are handed over at once after a restart when no lease its earlier incarnation gave may still run", () => {
    const g = group();
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    r.restarted(5_000, 4_000);
    r.retire(g.rev + 1);
    expect(r.handOver(5_000)).not.toBeNull();
  });
});

describe("GroupRouter: a virtual key's counters among 30,000 keys that each send once", () => {
  it("stay bounded, and a key in steady use keeps its count (no reset) while the one-shot keys come and go", () => {
    const g = group({ leaseTtlMs: 1000 });
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    const send = (id: string, now: number) => {
      const d = decided(r.route(g.version, [], [], now, key(id)));
      r.release({ lease: d.lease, outcome: "ok", key: id, backendId: d.backendId, usage: { prompt: 10, completion: 1, cached: 0 } }, now);
    };
    let steady = 0;
    for (let i = 0; i < 30_000; i++) {
      send(`key_${i}`, i);
      if (i % 100 === 0) {
        send("key_steady", i);
        steady++;
      }
    }
    const keys = r.metrics().keys;
    expect(keys.length).toBeLessThanOrEqual(10_000);
    expect(keys.find((k) => k.id === "key_steady")?.requests).toBe(steady);
    // What limits are checked against is forgotten by the alarm's sweep once a key is idle and its usage reached the tenants object.
    for (let b = r.ledger.takeBatch(); b; b = r.ledger.takeBatch()) r.ledger.sent({});
    r.ledger.sweep(30_000 + 120_001);
    expect(r.ledger.size).toBe(0);
  });
});

describe("a routing object's metrics answer (packKeys, unpackKeys)", () => {
  it("carries 10,000 keys as two arrays, not 10,000 objects, and reads back as the same keys, handed-over ones too; an earlier release's list as it is", () => {
    const g = group({ leaseTtlMs: 1000 });
    const r = new GroupRouter("g", () => 0.5);
    r.install(g, 0);
    for (let i = 0; i < 10_000; i++) {
      const d = decided(r.route(g.version, [], [], i, key(`key_${i}`)));
      r.release({ lease: d.lease, outcome: "ok", key: `key_${i}`, backendId: d.backendId, usage: { prompt: i, completion: 1, cached: i % 7 } }, i);
    }
    // A key refused for its rpm: its limit hits come, the limits it never hit do not.
    expect(r.route(g.version, [], [], 10_000, key("key_1", { rpm: 1 }))).toMatchObject({ refused: "limited", limit: "rpm" });
    const own = new GroupRouter("g", () => 0.5);
    own.install(g, 0);
    own.adopt([{ object: "g\u001f1", metrics: r.metrics() }]);
    const m = own.metrics();
    const sent = packKeys(m);
    expect([sent.keys.length, sent.handedOver?.[0]?.metrics.keys.length, sent.handedOver?.[0]?.metrics.keyColumns?.ids.length]).toEqual([0, 0, 10_000]);
    expect(sent.handedOver?.[0]?.metrics.keyColumns?.values).toBeInstanceOf(Float64Array);
    const received = unpackKeys(structuredClone(sent));
    expect(received).toEqual(JSON.parse(JSON.stringify(m)));
    expect(received.handedOver?.[0]?.metrics.keys.find((k) => k.id === "key_1")?.limitHits).toEqual({ rpm: 1 });
    expect(unpackKeys(m)).toEqual(m);
  });
});
