import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { PRUNE_CHUNK_KEYS, PRUNE_CHUNK_ROWS, type Tenants, USAGE_KEPT_DAYS } from "../../durable-objects/tenants.ts";
import { keyHash, looksLikeVirtualKey, prefixOf } from "../../src/tenants/key-format.ts";
import { dayOf, periodOf, periodStartDay } from "../../src/tenants/period.ts";
import type { BudgetPeriod, IssuedKey, TenantsResult, UsageRow } from "../../src/tenants/protocol.ts";
import { failNext } from "./storage-faults.ts";
import { DAY_MS, rowsReadBy, tenants, usageRow as row } from "./tenants.ts";

/**
 * The tenants' Durable Object as the gateway's Worker (lookup) and the routing objects (record)
 * call it: keys found by their hash only, usage summed exactly over batches, spend per budget period.
 */

function value<T>(r: TenantsResult<T>): T {
  if (!r.ok) throw new Error(`refused: ${r.status} ${r.message}`);
  return r.value;
}

async function created(body: Record<string, unknown> = {}): Promise<IssuedKey> {
  return value(await tenants().create(body));
}

/** Every value the object stores, as text. */
const storedText = () =>
  runInDurableObject(tenants(), (_o, state) => JSON.stringify([state.storage.sql.exec("SELECT * FROM keys").toArray(), state.storage.sql.exec("SELECT * FROM usage").toArray()]));

describe("lookup", () => {
  it("finds a key by its SHA-256 only, and the key is stored nowhere", async () => {
    const { key, lookup } = await created({ name: "lookup", rpm: 10, models: ["a", "b"] });
    expect(looksLikeVirtualKey(key)).toBe(true);
    const hash = await keyHash(key);
    const found = await tenants().lookup(hash);
    expect(found?.record).toEqual(lookup.record);
    expect(found?.record).toMatchObject({ prefix: prefixOf(key), name: "lookup", rpm: 10, models: ["a", "b"], tpm: null, budgetPeriod: "month", trackUsage: true, revokedAt: null, expiresAt: null });
    expect(found?.spent).toEqual({ period: periodOf("month", Date.now()), tokens: 0, costMicros: 0 });
    expect(JSON.stringify(found)).not.toContain(key);
    expect(JSON.stringify(found)).not.toContain(hash);

    const stored = await storedText();
    expect(stored).toContain(hash);
    expect(stored).not.toContain(key);
    expect(stored).not.toContain(key.slice(prefixOf(key).length));

    expect(await tenants().lookup(await keyHash(`${key}x`))).toBeNull();
    expect(await tenants().lookup("")).toBeNull();
  });

  it("still finds a revoked key (the gateway says it is revoked); a rotated key's old hash finds nothing", async () => {
    const { key, lookup } = await created();
    const id = lookup.record.id;
    await tenants().record([row(id, dayOf(Date.now()), "m", "b0", 100, 10)], []);

    const rotated = value(await tenants().rotate(id));
    expect(rotated.key).not.toBe(key);
    expect(await tenants().lookup(await keyHash(key))).toBeNull();
    const now = await tenants().lookup(await keyHash(rotated.key));
    expect(now?.record).toMatchObject({ id, prefix: prefixOf(rotated.key), createdAt: lookup.record.createdAt });
    // Usage goes on under the same id.
    expect(now?.spent.tokens).toBe(110);

    value(await tenants().revoke(id));
    const revoked = await tenants().lookup(await keyHash(rotated.key));
    expect(revoked?.record.id).toBe(id);
    expect(revoked?.record.revokedAt).toBeTypeOf("number");
    const again = await tenants().rotate(id);
    expect(again).toMatchObject({ ok: false, status: 409, code: "key_revoked" });
  });
});

describe("record", () => {
  it("stores a batch sent again under its id once: a routing object whose answer was lost sends it again, and it may have been stored", async () => {
    const id = (await created()).lookup.record.id;
    const today = dayOf(Date.now());
    const batch = [row(id, today, "m", "b0", 100, 10)];
    const first = await tenants().record(batch, [], { from: "group-a", id: "batch-1" });
    const again = await tenants().record(batch, [], { from: "group-a", id: "batch-1" });
    expect(first[id]?.tokens).toBe(110);
    expect(again[id]?.tokens).toBe(110);
    // Another batch with the same rows is other requests' usage, and so is another object's batch of that id.
    expect((await tenants().record(batch, [], { from: "group-a", id: "batch-2" }))[id]?.tokens).toBe(220);
    expect((await tenants().record(batch, [], { from: "group-b", id: "batch-2" }))[id]?.tokens).toBe(330);
    const report = value(await tenants().usage({ key: id, since: null, until: null, model: null, limit: 1000, after: null }));
    expect(report.totals).toMatchObject({ promptTokens: 300, completionTokens: 30, requests: 3 });
  });

  it("sums rows over batches exactly, answers each key's spend, and keeps rows of keys it does not know", async () => {
    const a = (await created()).lookup.record.id;
    const b = (await created({ budget_period: "day" })).lookup.record.id;
    const quiet = (await created()).lookup.record.id;
    const today = dayOf(Date.now());
    // Three batches, as routing objects of two groups would send them: the same (key, day, model, backend) again and again.
    const batches: UsageRow[][] = [
      [row(a, today, "llama", "gpu-0", 1000, 31), row(a, today, "llama", "gpu-1", 7, 3), row(b, today, "qwen", "gpu-9", 50, 5)],
      [row(a, today, "llama", "gpu-0", 999, 1, { requests: 3 }), row("key_gone", today, "llama", "gpu-0", 4, 4)],
      [row(a, today, "qwen", "gpu-9", 1, 1), row(b, today, "qwen", "gpu-9", 50, 5), row(a, today, "llama", "gpu-0", 1, 0)],
    ];
    let answer: Record<string, unknown> = {};
    for (const batch of batches) answer = await tenants().record(batch, [quiet]);

    const all = batches.flat();
    const sum = (id: string, f: (r: UsageRow) => number) => all.filter((r) => r.key === id).reduce((n, r) => n + f(r), 0);
    const tokens = (id: string) => sum(id, (r) => r.promptTokens + r.completionTokens);
    const spentA = { period: periodOf("month", Date.now()), tokens: tokens(a), costMicros: sum(a, (r) => r.costMicros) };
    // The last batch named a, b and quiet (by `keys`); the unknown key has no spend to answer.
    expect(answer).toEqual({
      [a]: spentA,
      [b]: { period: today, tokens: tokens(b), costMicros: sum(b, (r) => r.costMicros) },
      [quiet]: { period: periodOf("month", Date.now()), tokens: 0, costMicros: 0 },
    });
    expect(value(await tenants().get(a)).spent).toEqual(spentA);

    const report = value(await tenants().usage({ key: a, since: null, until: null, model: null, limit: 1000, after: null }));
    expect(report.totals).toEqual({
      promptTokens: sum(a, (r) => r.promptTokens),
      completionTokens: sum(a, (r) => r.completionTokens),
      cachedTokens: sum(a, (r) => r.cachedTokens),
      requests: sum(a, (r) => r.requests),
      costMicros: sum(a, (r) => r.costMicros),
    });
    expect(report.rows.map((r) => [r.model, r.backend, r.promptTokens, r.requests])).toEqual([
      ["llama", "gpu-0", 2000, 5],
      ["llama", "gpu-1", 7, 1],
      ["qwen", "gpu-9", 1, 1],
    ]);
    const qwen = value(await tenants().usage({ key: a, since: today, until: today, model: "qwen", limit: 1000, after: null }));
    expect(qwen.totals.promptTokens).toBe(1);
    // Usage is history: a key that is gone (or never was) keeps its rows.
    expect(value(await tenants().usage({ key: "key_gone", since: null, until: null, model: null, limit: 1000, after: null })).totals.promptTokens).toBe(4);
    expect(await tenants().usage({ key: "key_never", since: null, until: null, model: null, limit: 1000, after: null })).toMatchObject({ ok: false, status: 404 });
  });

  it("counts each budget period's days: today for a day, this month for a month, every day for total", async () => {
    const now = Date.now();
    const days = [0, 1, 2, 27, 40, 90, 300].map((n) => dayOf(now - n * DAY_MS));
    for (const period of ["day", "month", "total"] as BudgetPeriod[]) {
      const { key, lookup } = await created({ budget_period: period });
      const id = lookup.record.id;
      const rows = days.map((d, i) => row(id, d, "m", "b", 10 ** i, i));
      await tenants().record(rows, []);
      const start = periodStartDay(periodOf(period, Date.now()));
      const inPeriod = rows.filter((r) => r.day >= start);
      const expected = { period: periodOf(period, Date.now()), tokens: inPeriod.reduce((n, r) => n + r.promptTokens + r.completionTokens, 0), costMicros: inPeriod.reduce((n, r) => n + r.costMicros, 0) };
      expect((await tenants().lookup(await keyHash(key)))?.spent, period).toEqual(expected);
      if (period === "day") expect(expected.tokens).toBe(1);
      if (period === "total") expect(expected.tokens).toBe(1111111 + 21);
    }
  });
});

describe("the daily prune", () => {
  it("drops usage rows past the days kept, and a total budget still counts them", async () => {
    const { key, lookup } = await created({ budget_period: "total" });
    const id = lookup.record.id;
    const now = Date.now();
    const old = dayOf(now - (USAGE_KEPT_DAYS + 5) * DAY_MS);
    const recent = dayOf(now - 3 * DAY_MS);
    await tenants().record([row(id, old, "m", "b", 500, 50), row(id, recent, "m", "b", 7, 7), row("key_gone_too", old, "m", "b", 1, 1)], []);
    const before = await tenants().lookup(await keyHash(key));
    expect(before?.spent.tokens).toBe(564);

    // A batch of usage set the alarm; run it now rather than at midnight.
    expect(await runDurableObjectAlarm(tenants())).toBe(true);
    const report = value(await tenants().usage({ key: id, since: "2000-01-01", until: null, model: null, limit: 1000, after: null }));
    expect(report.rows.map((r) => r.day)).toEqual([recent]);
    expect((await tenants().lookup(await keyHash(key)))?.spent).toEqual(before?.spent);
    // The running totals of periods past are dropped too (the day 3 days ago's): all time, this month and today are what a budget asks for.
    const today = dayOf(Date.now());
    const periods = await runInDurableObject(tenants(), (_o, state) => state.storage.sql.exec<{ period: string }>("SELECT period FROM spend WHERE key = ? ORDER BY period", id).toArray().map((r) => r.period));
    expect(periods).toEqual(recent.slice(0, 7) === today.slice(0, 7) ? [today.slice(0, 7), "total"] : ["total"]);
    expect(await tenants().usage({ key: "key_gone_too", since: "2000-01-01", until: null, model: null, limit: 1000, after: null })).toMatchObject({ ok: false, status: 404 });
    // Nothing more to prune until usage comes again.
    expect(await runDurableObjectAlarm(tenants())).toBe(false);
  });

  it("is set again by the next batch after a prune that failed: the runtime gives a failing alarm up after its retries, and the object lives on", async () => {
    const stub = env.TENANTS.getByName(`prune-failed-${crypto.randomUUID()}`);
    const now = Date.now();
    await stub.record([row("key_a", dayOf(now - (USAGE_KEPT_DAYS + 5) * DAY_MS), "m", "b", 1, 1)], []);
    await failNext(stub, "DELETE FROM usage");
    await expect(runDurableObjectAlarm(stub)).rejects.toThrow("storage error (test)");
    // Given up, as after the last retry: no alarm is left.
    await runInDurableObject(stub, (_o, state) => state.storage.deleteAlarm());
    await stub.record([row("key_a", dayOf(now), "m", "b", 1, 1)], []);
    expect(await runInDurableObject(stub, (_o, state) => state.storage.getAlarm())).not.toBeNull();
    // And that prune drops the row the failed one left.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await runInDurableObject(stub, (_o, state) => state.storage.sql.exec("SELECT day FROM usage").toArray())).toEqual([{ day: dayOf(now) }]);
  });
});

describe("the daily prune of a large table", () => {
  it("reads the rows it drops and a couple for each key, not every row kept (a scan of tens of millions of rows held every key lookup for seconds)", async () => {
    const stub = env.TENANTS.getByName(`prune-indexed-${crypto.randomUUID()}`);
    const now = Date.now();
    await stub.record([row("key_a", dayOf(now), "m", "b", 1, 1)], []);
    await insertUsage(stub, 20_000, dayOf(now - DAY_MS));
    await insertUsage(stub, 1, dayOf(now - (USAGE_KEPT_DAYS + 1) * DAY_MS));
    const read = await rowsReadBy(stub, (o) => o.alarm());
    // 51 keys (insertUsage's 50 and key_a): a seek for each, and one for its first day kept.
    expect(read).toBeLessThan(250);
    expect(await usageCount(stub)).toBe(20_001);
  }, 60_000);

  it("drops a backlog in bounded chunks, one transaction each, the alarm set again a second on while rows past the days kept remain", async () => {
    const stub = env.TENANTS.getByName(`prune-chunks-${crypto.randomUUID()}`);
    const now = Date.now();
    await stub.record([row("key_a", dayOf(now), "m", "b", 1, 1)], []);
    await insertUsage(stub, PRUNE_CHUNK_ROWS + 5, dayOf(now - (USAGE_KEPT_DAYS + 1) * DAY_MS));
    const alarm = () => runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
    expect(await alarm()).toBeGreaterThan(now + 60_000);

    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await usageCount(stub)).toBe(6);
    // Soon, not at the next midnight; and a batch meanwhile does not move it there.
    await stub.record([row("key_a", dayOf(now), "m", "b", 1, 1)], []);
    expect(await alarm()).toBeLessThan(Date.now() + 10_000);

    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await usageCount(stub)).toBe(1);
    // Done: the next batch sets the next day's prune.
    expect(await alarm()).toBeNull();
    await stub.record([row("key_a", dayOf(now), "m", "b", 1, 1)], []);
    expect(await alarm()).toBeGreaterThan(now + 60_000);
  }, 60_000);
});

describe("the daily prune of many keys", () => {
  it("looks at PRUNE_CHUNK_KEYS keys a transaction, not every key, and goes on a second later (found by review: on a day with next to nothing old, a pass over a million keys held the object past an alarm's 30 s)", async () => {
    const stub = env.TENANTS.getByName(`prune-keys-${crypto.randomUUID()}`);
    const now = Date.now();
    await stub.record([row("key_a", dayOf(now), "m", "b", 1, 1)], []);
    await runInDurableObject(stub, (_o, state) =>
      state.storage.transactionSync(() => {
        for (let i = 0; i < PRUNE_CHUNK_KEYS + 5; i++) state.storage.sql.exec("INSERT INTO usage VALUES (?, ?, 'm', 'b', 1, 1, 0, 1, 1)", `key_m${String(i).padStart(6, "0")}`, dayOf(now));
        // The one old row, under the key looked at last.
        state.storage.sql.exec("INSERT INTO usage VALUES ('key_zz', ?, 'm', 'b', 1, 1, 0, 1, 1)", dayOf(now - (USAGE_KEPT_DAYS + 1) * DAY_MS));
      }),
    );
    const alarm = () => runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
    const old = () => runInDurableObject(stub, (_o, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM usage WHERE key = 'key_zz'").one().n);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await old()).toBe(1);
    expect(await alarm()).toBeLessThan(Date.now() + 10_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await old()).toBe(0);
    expect(await alarm()).toBeNull();
  }, 60_000);
});

/** `n` usage rows of `day` written straight into the object's table, in one transaction (one for each of `n` backends). */
function insertUsage(stub: DurableObjectStub<Tenants>, n: number, day: string): Promise<void> {
  return runInDurableObject(stub, (_o, state) =>
    state.storage.transactionSync(() => {
      for (let i = 0; i < n; i++) state.storage.sql.exec("INSERT INTO usage VALUES (?, ?, 'm', ?, 1, 1, 0, 1, 1)", `key_${i % 50}`, day, `gpu-${day}-${i}`);
    }),
  );
}

const usageCount = (stub: DurableObjectStub<Tenants>) => runInDurableObject(stub, (_o, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM usage").one().n);

describe("origins", () => {
  it("are those of every key, live, revoked or expired: a page whose key the gateway no longer takes is granted the preflight its 401 needs", async () => {
    const every = ["https://live.example", "http://localhost:5173", "https://revoked.example", "https://expiring.example"];
    await created({ origins: every.slice(0, 2) });
    const gone = await created({ origins: ["https://revoked.example"] });
    value(await tenants().revoke(gone.lookup.record.id));
    // A margin a loaded machine's create survives: an expiry already past when it lands is refused.
    const soon = await created({ origins: ["https://expiring.example"], expires_at: new Date(Date.now() + 5000).toISOString() });
    expect(await tenants().origins()).toEqual(expect.arrayContaining(every));
    await new Promise((r) => setTimeout(r, (soon.lookup.record.expiresAt as number) + 100 - Date.now()));
    // Once the key has expired, its page is still in.
    await created({ origins: [] });
    expect(await tenants().origins()).toEqual(expect.arrayContaining(every));
  }, 30_000);

  it("follow every key made and changed: an origin no key names any more is gone, one another key still names stays", async () => {
    const o = (name: string) => `https://${name}-${crypto.randomUUID().slice(0, 8)}.example`;
    const [a, b, c] = [o("a"), o("b"), o("c")];
    const first = await created({ origins: [a] });
    expect(await tenants().origins()).toContain(a);
    await created({ origins: [b] });
    expect(await tenants().origins()).toEqual(expect.arrayContaining([a, b]));
    value(await tenants().update(first.lookup.record.id, { origins: [a, c] }));
    expect(await tenants().origins()).toEqual(expect.arrayContaining([a, b, c]));
    value(await tenants().update(first.lookup.record.id, { origins: [c] }));
    const afterDrop = await tenants().origins();
    expect(afterDrop).not.toContain(a);
    expect(afterDrop).toEqual(expect.arrayContaining([b, c]));
    await created({ origins: [c] });
    value(await tenants().update(first.lookup.record.id, { origins: [] }));
    expect(await tenants().origins()).toEqual(expect.arrayContaining([b, c]));
  });
});
