import { describe, expect, it } from "vitest";
import type { RouteTenant } from "../../src/routing/protocol.ts";
import { msToNextPeriod, TenantLedger } from "../../src/tenants/ledger.ts";
import { MinuteWindow } from "../../src/tenants/window.ts";

const T0 = Date.UTC(2026, 10, 23, 12, 0, 0);
const where = { model: "m", backend: "b0", costMicros: 0 };

function tenant(over: Partial<RouteTenant> = {}): RouteTenant {
  return { id: "key_a", rpm: null, tpm: null, maxParallel: null, budget: null, admitted: false, ...over };
}

describe("a minute window", () => {
  it("counts the last 60 seconds and says when a second leaves it", () => {
    const w = new MinuteWindow();
    w.add(T0, 3);
    w.add(T0 + 10_500, 2);
    expect(w.total(T0 + 59_999)).toBe(5);
    expect(w.total(T0 + 60_000)).toBe(2);
    // Below 5 once T0's second has left: at T0 + 60 s.
    expect(w.msUntilBelow(5, T0 + 30_000)).toBe(30_000);
    // Below 2 only once both have left: at T0 + 70 s.
    expect(w.msUntilBelow(2, T0 + 30_000)).toBe(40_000);
    expect(w.empty(T0 + 71_000)).toBe(true);
  });
});

describe("a routing object's ledger of virtual keys", () => {
  it("refuses the request past the key's requests per minute, and says when the next one fits", () => {
    const l = new TenantLedger();
    const t = tenant({ rpm: 3 });
    for (let i = 0; i < 3; i++) {
      expect(l.check(t, T0 + i * 1000)).toBeNull();
      l.took(t, T0 + i * 1000);
      l.finished(t.id, undefined, true, where, T0 + i * 1000 + 10);
    }
    expect(l.check(t, T0 + 5000)).toEqual({ limit: "rpm", retryAfterMs: 55_000 });
    expect(l.check(t, T0 + 60_000)).toBeNull();
    // A retry of an admitted request is not checked, and not counted again.
    expect(l.check({ ...t, admitted: true }, T0 + 5000)).toBeNull();
    l.took({ ...t, admitted: true }, T0 + 5000);
    expect(l.check(t, T0 + 60_000)).toBeNull();
  });

  it("refuses past the key's requests in flight, and counts an expired lease out", () => {
    const l = new TenantLedger();
    const t = tenant({ maxParallel: 2 });
    l.took(t, T0);
    l.took(t, T0);
    expect(l.check(t, T0)?.limit).toBe("parallel");
    l.expired(t.id);
    expect(l.check(t, T0)).toBeNull();
    l.finished(t.id, undefined, false, where, T0);
    l.finished(t.id, undefined, false, where, T0);
    // Never below zero: a second release of nothing leaves room for exactly two.
    l.took(t, T0);
    l.took(t, T0);
    expect(l.check(t, T0)?.limit).toBe("parallel");
  });

  it("counts the upstream's tokens for the key's tokens per minute", () => {
    const l = new TenantLedger();
    const t = tenant({ tpm: 1000 });
    l.took(t, T0);
    l.finished(t.id, { prompt: 700, completion: 299, cached: 500 }, true, where, T0 + 100);
    expect(l.check(t, T0 + 200)).toBeNull();
    l.took(t, T0 + 200);
    l.finished(t.id, { prompt: 1, completion: 0, cached: 0 }, true, where, T0 + 2_000);
    expect(l.check(t, T0 + 3_000)).toEqual({ limit: "tpm", retryAfterMs: 57_000 });
  });

  it("checks a budget against the tenants object's total plus what finished here since, in the current period", () => {
    const l = new TenantLedger();
    const spent = { period: "2026-11", tokens: 900, costMicros: 0 };
    const t = tenant({ budget: { tokens: 1000, costMicros: null, period: "month", spent } });
    expect(l.check(t, T0)).toBeNull();
    l.took(t, T0);
    l.finished(t.id, { prompt: 60, completion: 40, cached: 0 }, true, where, T0 + 1);
    const refused = l.check(t, T0 + 2);
    expect(refused?.limit).toBe("budget");
    expect(refused?.retryAfterMs).toBe(msToNextPeriod("month", T0 + 2));
    // The batch goes out; the tenants object answers a total that includes it: still spent, not counted twice.
    const batch = l.takeBatch();
    expect(batch?.rows).toEqual([{ key: "key_a", day: "2026-11-23", model: "m", backend: "b0", promptTokens: 60, completionTokens: 40, cachedTokens: 0, requests: 1, costMicros: 0 }]);
    l.sent({ key_a: { period: "2026-11", tokens: 1000, costMicros: 0 } });
    expect(l.check({ ...t, budget: { ...t.budget!, tokens: 1001 } }, T0 + 3)).toBeNull();
    expect(l.check(t, T0 + 3)?.limit).toBe("budget");
    // A new month: last month's spend does not count.
    const next = Date.UTC(2026, 11, 1, 0, 0, 1);
    expect(l.check(t, next)).toBeNull();
  });

  it("sends a batch whose answer did not come again as it was, under its id (the tenants object may have stored it); what came since goes next", () => {
    const l = new TenantLedger();
    const t = tenant({ budget: { tokens: 100, costMicros: null, period: "total", spent: { period: "total", tokens: 0, costMicros: 0 } } });
    l.took(t, T0);
    l.finished(t.id, { prompt: 30, completion: 20, cached: 10 }, true, { ...where, costMicros: 7 }, T0);
    const first = l.takeBatch();
    expect(l.takeBatch()).toBeNull();
    l.took(t, T0);
    l.finished(t.id, { prompt: 5, completion: 5, cached: 0 }, true, { ...where, costMicros: 1 }, T0);
    const sentFirst = structuredClone(first);
    l.unsent();
    // Said twice (or with no batch on its way), it loses nothing.
    l.unsent();
    expect(l.pendingRows).toBe(2);
    const again = l.takeBatch();
    expect(again).toEqual(sentFirst);
    expect(again?.id).toMatch(/^[0-9a-f-]{36}$/);
    // Unsent usage still counts against the budget: 60 of 100.
    expect(l.check({ ...t, budget: { ...t.budget!, tokens: 60 } }, T0)?.limit).toBe("budget");
    expect(l.check(t, T0)).toBeNull();
    l.sent({ key_a: { period: "total", tokens: 50, costMicros: 7 } });
    const next = l.takeBatch();
    expect(next?.id).not.toBe(first?.id);
    expect(next?.rows).toEqual([{ key: "key_a", day: "2026-11-23", model: "m", backend: "b0", promptTokens: 5, completionTokens: 5, cachedTokens: 0, requests: 1, costMicros: 1 }]);
    expect(msToNextPeriod("total", T0)).toBeNull();
  });

  it("gives what a failed send left to save, the batch under its id and the rows behind it summed; a restarted object sends that batch first, as it was, and counts it all against budgets until acknowledged", () => {
    const l = new TenantLedger();
    const t = tenant({ budget: { tokens: 100, costMicros: null, period: "total", spent: { period: "total", tokens: 0, costMicros: 0 } } });
    const use = (prompt: number, backend: string) => {
      l.took(t, T0);
      l.finished(t.id, { prompt, completion: 0, cached: 0 }, true, { ...where, backend }, T0);
    };
    use(10, "b0");
    const failed = structuredClone(l.takeBatch());
    use(20, "b1");
    use(5, "b1");
    // A batch on its way is the one to go first.
    expect(l.unsentToSave()?.batch.id).toBe(failed?.id);
    l.unsent();
    const saved = structuredClone(l.unsentToSave());
    expect(saved?.batch).toEqual({ id: failed?.id, rows: failed?.rows });
    expect(saved?.pending.map((r) => [r.backend, r.promptTokens, r.requests])).toEqual([["b1", 25, 2]]);
    // A restarted object: the failed batch first, under its id, then the rows; all count against the budget until acknowledged.
    const restarted = new TenantLedger();
    restarted.restoreUnsent(saved!, T0);
    expect(restarted.pendingRows).toBe(2);
    expect(restarted.check({ ...t, budget: { ...t.budget!, tokens: 35 } }, T0)?.limit).toBe("budget");
    expect(restarted.check(t, T0)).toBeNull();
    const first = restarted.takeBatch();
    expect(first).toEqual(failed);
    restarted.sent({});
    expect(restarted.takeBatch()?.rows.map((r) => [r.backend, r.promptTokens, r.requests])).toEqual([["b1", 25, 2]]);
    restarted.sent({});
    expect(restarted.pendingRows).toBe(0);
    expect(restarted.check({ ...t, budget: { ...t.budget!, tokens: 1 } }, T0)).toBeNull();
  });

  it("gives a copy of the unsent usage that does not grow with the outage: after any number of failed sends of the same keys, the failed batch and a row per key, day, model and backend", () => {
    const l = new TenantLedger();
    const combinations = (round: number) => {
      for (const key of ["key_a", "key_b", "key_c"]) for (const backend of ["b0", "b1"]) l.finished(key, { prompt: 1, completion: round, cached: 0 }, true, { ...where, backend }, T0);
    };
    combinations(0);
    const failed = l.takeBatch();
    const sizes = new Set<string>();
    let requests = 6;
    for (let round = 1; round <= 720; round++) {
      combinations(round);
      requests += 6;
      l.unsent();
      const saved = l.unsentToSave();
      sizes.add(`${saved?.batch.rows.length} + ${saved?.pending.length}`);
      // All that finished is in it.
      expect([...(saved?.batch.rows ?? []), ...(saved?.pending ?? [])].reduce((n, r) => n + r.requests, 0)).toBe(requests);
      // The failed batch goes again at the next try (and fails again).
      expect(l.takeBatch()?.id).toBe(failed?.id);
    }
    expect([...sizes]).toEqual(["6 + 6"]);
  });

  it("once sends arrive again, cuts the rows a failure left into batches before they are sent, and owes nothing once those are delivered, whatever finished since", () => {
    const l = new TenantLedger();
    const use = (backend: string) => l.finished("key_a", { prompt: 1, completion: 1, cached: 0 }, true, { ...where, backend }, T0);
    use("first");
    l.takeBatch();
    // 2,500 rows wait behind the failed batch: two batches' worth.
    for (let b = 0; b < 2500; b++) use(`b${b}`);
    l.unsent();
    // Nothing is cut while a batch is to go first.
    expect(l.cutOwed()).toBe(false);
    l.takeBatch();
    l.sent({});
    expect(l.cutOwed()).toBe(true);
    const next = l.unsentToSave();
    expect([next?.batch.rows.length, next?.pending.length]).toEqual([2000, 500]);
    use("later");
    // The batch sent is the one the copy names.
    expect(l.takeBatch()?.id).toBe(next?.batch.id);
    l.sent({});
    expect(l.cutOwed()).toBe(true);
    const last = l.unsentToSave();
    expect([last?.batch.rows.length, last?.pending.length]).toEqual([501, 0]);
    expect(l.takeBatch()?.id).toBe(last?.batch.id);
    l.sent({});
    use("after");
    // What finished since the last failure is not waited for.
    expect(l.cutOwed()).toBe(false);
    expect(l.pendingRows).toBe(1);
  });

  it("forgets a key idle for two minutes with nothing in flight or unsent", () => {
    const l = new TenantLedger();
    const t = tenant({ rpm: 10 });
    l.took(t, T0);
    l.sweep(T0 + 600_000);
    expect(l.size).toBe(1);
    l.finished(t.id, undefined, false, where, T0 + 1);
    l.sweep(T0 + 121_000);
    expect(l.size).toBe(0);
  });

  it("forgets a key whose usage the tenants object acknowledged, though its dollars were summed in another order than the batches'", () => {
    const l = new TenantLedger();
    const t = tenant();
    // 0.1 and 0.2 micro-dollars on two backends go in one batch; 0.3 finishes while it is away.
    // ((0.1 + 0.2) + 0.3) - (0.1 + 0.2) - 0.3 is 5.6e-17 in floating point, not 0.
    for (const [backend, costMicros] of [["b0", 0.1], ["b1", 0.2]] as const) {
      l.took(t, T0);
      l.finished(t.id, { prompt: 1, completion: 0, cached: 0 }, true, { ...where, backend, costMicros }, T0);
    }
    expect(l.takeBatch()).not.toBeNull();
    l.took(t, T0);
    l.finished(t.id, { prompt: 1, completion: 0, cached: 0 }, true, { ...where, costMicros: 0.3 }, T0);
    l.sent({});
    expect(l.takeBatch()).not.toBeNull();
    l.sent({});
    l.sweep(T0 + 121_000);
    expect(l.size).toBe(0);
  });
});
