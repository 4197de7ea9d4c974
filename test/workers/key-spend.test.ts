import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Tenants } from "../../durable-objects/tenants.ts";
import { keyHash } from "../../src/tenants/key-format.ts";
import { dayOf, periodOf, periodStartDay } from "../../src/tenants/period.ts";
import type { BudgetPeriod, IssuedKey, KeyRecord, TenantsResult, UsageRow } from "../../src/tenants/protocol.ts";
import { DAY_MS, inListOrder, rowsReadBy, rowsWrittenBy, tenants, usageRow as row } from "./tenants.ts";

/**
 * A key's spend in its budget period, as each lookup answers it: a running total kept beside the
 * usage rows, so a key looked up on its 300th day of heavy traffic costs what it did on its first,
 * exact across the object's restarts, and carried over from an object made before it was kept.
 */

function value<T>(r: TenantsResult<T>): T {
  if (!r.ok) throw new Error(`refused: ${r.status} ${r.message}`);
  return r.value;
}

type Stub = DurableObjectStub<Tenants>;

async function created(stub: Stub, body: Record<string, unknown>): Promise<IssuedKey> {
  return value(await stub.create(body));
}

/** Usage of the key over `days` days up to today, on `backends` backends: one row a day and backend. */
function history(id: string, days: number, backends: number, now: number): UsageRow[] {
  const rows: UsageRow[] = [];
  for (let d = 0; d < days; d++) for (let b = 0; b < backends; b++) rows.push(row(id, dayOf(now - d * DAY_MS), "m", `gpu-${b}`, 10 + d, b, { costMicros: 7 }));
  return rows;
}

function expectedSpent(rows: UsageRow[], period: BudgetPeriod, now: number, carried = { tokens: 0, costMicros: 0 }) {
  const start = periodStartDay(periodOf(period, now));
  const inPeriod = rows.filter((r) => r.day >= start);
  return {
    period: periodOf(period, now),
    tokens: inPeriod.reduce((n, r) => n + r.promptTokens + r.completionTokens, 0) + carried.tokens,
    costMicros: inPeriod.reduce((n, r) => n + r.costMicros, 0) + carried.costMicros,
  };
}

describe("a key's spend", () => {
  it("is read without reading the key's usage history: a lookup reads as many rows on day 300 as on day 1", async () => {
    const stub = tenants();
    const now = Date.now();
    const reads: Record<string, number> = {};
    for (const [name, days] of [["new", 1], ["old", 300]] as const) {
      const { key, lookup } = await created(stub, { budget_period: "total", budget_usd: 100 });
      const rows = history(lookup.record.id, days, 10, now);
      for (let i = 0; i < rows.length; i += 1000) await stub.record(rows.slice(i, i + 1000), []);
      const hash = await keyHash(key);
      reads[name] = await rowsReadBy(stub, (o) => expect(o.lookup(hash)?.spent).toEqual(expectedSpent(rows, "total", now)));
      reads[`${name} get`] = await rowsReadBy(stub, (o) => value(o.get(lookup.record.id)));
    }
    // The key's row and its spend's: 3,000 usage rows were summed at each lookup of the old key.
    expect(reads).toEqual({ new: reads.new, old: reads.new, "new get": reads["new get"], "old get": reads["new get"] });
    expect(reads.new).toBeLessThanOrEqual(2);
  });

  it("is exact for each budget period after the object restarts, and goes on from there", async () => {
    const stub = tenants();
    const now = Date.now();
    for (const period of ["day", "month", "total"] as BudgetPeriod[]) {
      const { key, lookup } = await created(stub, { budget_period: period });
      const rows = history(lookup.record.id, 45, 3, now);
      await stub.record(rows, []);
      await evictDurableObject(stub);
      const hash = await keyHash(key);
      expect((await stub.lookup(hash))?.spent, period).toEqual(expectedSpent(rows, period, now));
      const more = [row(lookup.record.id, dayOf(now), "m", "gpu-0", 5, 5, { costMicros: 11 })];
      const answered = await stub.record(more, [], { from: "group-a", id: `after-restart-${period}` });
      expect(answered[lookup.record.id], period).toEqual(expectedSpent([...rows, ...more], period, now));
      // A batch sent again is counted once in the spend too.
      await stub.record(more, [], { from: "group-a", id: `after-restart-${period}` });
      expect((await stub.lookup(hash))?.spent, period).toEqual(expectedSpent([...rows, ...more], period, now));
    }
  });
});

/** The tables as an object made before running totals were kept had them. */
const LEGACY_SCHEMA = [
  `CREATE TABLE keys (id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, record TEXT NOT NULL, created_at INTEGER NOT NULL,
    carried_tokens INTEGER NOT NULL DEFAULT 0, carried_cost_micros INTEGER NOT NULL DEFAULT 0)`,
  "CREATE INDEX keys_by_age ON keys (created_at, id)",
  `CREATE TABLE usage (key TEXT NOT NULL, day TEXT NOT NULL, model TEXT NOT NULL, backend TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL, cost_micros INTEGER NOT NULL, PRIMARY KEY (key, day, model, backend)) WITHOUT ROWID`,
  "CREATE TABLE senders (name TEXT PRIMARY KEY, last_batch TEXT NOT NULL, at INTEGER NOT NULL) WITHOUT ROWID",
];

describe("an object made before running totals were kept", () => {
  it("keeps each key's spend, pruned usage included, when it is next started, and lists its keys by status", async () => {
    // Its own object: its tables are rewritten as they were.
    const stub = env.TENANTS.getByName(`legacy-${crypto.randomUUID()}`);
    const now = Date.now();
    const keys: { key: string; period: BudgetPeriod; record: KeyRecord; rows: UsageRow[] }[] = [];
    for (const period of ["day", "month", "total"] as BudgetPeriod[]) {
      const { key, lookup } = await created(stub, { budget_period: period });
      keys.push({ key, period, record: lookup.record, rows: history(lookup.record.id, 40, 2, now) });
    }
    const carried = { tokens: 1_000_000, costMicros: 123_456 };
    const revoked = value(await stub.revoke((keys[0] as { rows: UsageRow[] }).rows[0]?.key as string)).record.id;
    await runInDurableObject(stub, (_o, state) => {
      const sql = state.storage.sql;
      const records = sql.exec<{ id: string; hash: string; record: string; created_at: number }>("SELECT id, hash, record, created_at FROM keys").toArray();
      for (const { name } of sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'").toArray()) sql.exec(`DROP TABLE ${name}`);
      for (const statement of LEGACY_SCHEMA) sql.exec(statement);
      for (const r of records) sql.exec("INSERT INTO keys (id, hash, record, created_at, carried_tokens, carried_cost_micros) VALUES (?, ?, ?, ?, ?, ?)", r.id, r.hash, r.record, r.created_at, carried.tokens, carried.costMicros);
      for (const { rows } of keys) {
        for (const r of rows) {
          sql.exec(
            "INSERT INTO usage (key, day, model, backend, prompt_tokens, completion_tokens, cached_tokens, requests, cost_micros) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            r.key, r.day, r.model, r.backend, r.promptTokens, r.completionTokens, r.cachedTokens, r.requests, r.costMicros,
          );
        }
      }
    });
    await evictDurableObject(stub);
    for (const { key, period, rows } of keys) {
      const hash = await keyHash(key);
      expect((await stub.lookup(hash))?.spent, period).toEqual(expectedSpent(rows, period, now, period === "total" ? carried : undefined));
      const more = [row(rows[0]?.key as string, dayOf(now), "m", "gpu-0", 1, 2, { costMicros: 3 })];
      await stub.record(more, []);
      expect((await stub.lookup(hash))?.spent, period).toEqual(expectedSpent([...rows, ...more], period, now, period === "total" ? carried : undefined));
    }
    const ids = (status: "active" | "revoked" | "expired") => stub.list({ limit: 100, after: null, status }).then((r) => value(r).keys.map((k) => k.record.id));
    expect(await ids("revoked")).toEqual([revoked]);
    expect(await ids("active")).toEqual(inListOrder(keys.slice(1).map((k) => k.record)));
    expect(await ids("expired")).toEqual([]);
  });
});

describe("the release before, beside this one (a deploy under way, or a rollback)", () => {
  it("lists every key when its Worker asks for a page with no status", async () => {
    const stub = env.TENANTS.getByName(`before-${crypto.randomUUID()}`);
    const made = inListOrder([await created(stub, { name: "a" }), await created(stub, { name: "b" })].map((k) => k.lookup.record));
    await stub.revoke(made[0] as string);
    // A Worker of the release before sends no `status`: the field is absent, not null.
    const page = value(await stub.list({ limit: 10, after: null } as Parameters<Stub["list"]>[0]));
    expect(page.keys.map((k) => k.record.id)).toEqual(made);
  });

  it("still reads the tables this release migrated: its lookup's and its list's columns are there", async () => {
    const stub = env.TENANTS.getByName(`rollback-${crypto.randomUUID()}`);
    const { key } = await created(stub, { budget_period: "total" });
    const hash = await keyHash(key);
    await runInDurableObject(stub, (_o, state) => {
      // d470e17's lookup and list, word for word.
      const row = state.storage.sql.exec<{ carried_tokens: number }>("SELECT record, carried_tokens, carried_cost_micros FROM keys WHERE hash = ?", hash).toArray()[0];
      expect(row?.carried_tokens).toBe(0);
      expect(state.storage.sql.exec("SELECT record, carried_tokens, carried_cost_micros FROM keys ORDER BY created_at, id LIMIT ?", 10).toArray()).toHaveLength(1);
    });
  });

  // A rollback while this release's step 3 is in place, and one that came while the object was
  // still at step 2 (a release of steps 1 and 2 alone), which step 3 fills in when it runs.
  const when = [
    { when: "after this release's step 3", undo: (_sql: SqlStorage) => {} },
    { when: "before this release's step 3", undo: toStep2 },
  ];

  it.each(when)("counts what d470e17 stored while rolled back to, in spend and statuses, for this release back again ($when)", async ({ undo }) => {
    const stub = env.TENANTS.getByName(`rolled-back-${crypto.randomUUID()}`);
    const now = Date.now();
    const keys = await keysOfEveryPeriod(stub, now);
    const [first] = keys as [KeyOfPeriod];
    const made = { ...first.record, id: "key_madewhilerolledback", expiresAt: now - 1 };
    const more = keys.flatMap((k) => history(k.record.id, 3, 2, now));
    await runInDurableObject(stub, (_o, state) => {
      undo(state.storage.sql);
      writeAsD470e17(state.storage.sql, { ...first.record, revokedAt: now }, made, more);
    });
    await evictDurableObject(stub);
    const ids = (status: "active" | "revoked" | "expired") => stub.list({ limit: 100, after: null, status }).then((r) => value(r).keys.map((k) => k.record.id));
    expect(await ids("revoked")).toEqual([first.record.id]);
    expect(await ids("expired")).toEqual([made.id]);
    expect(await ids("active")).toEqual(inListOrder(keys.slice(1).map((k) => k.record)));
    await expectCountedOnce(stub, keys, more, now);
  });

  // The release just before this one, and every one since running totals were kept (434c601):
  // it adds each batch to `spend` itself, so nothing may add it again.
  it.each(when)("counts what fd6b3c4 stored while rolled back to once, not twice, for this release back again ($when)", async ({ undo }) => {
    const stub = env.TENANTS.getByName(`rolled-back-once-${crypto.randomUUID()}`);
    const now = Date.now();
    const keys = await keysOfEveryPeriod(stub, now);
    const [first] = keys as [KeyOfPeriod];
    const more = keys.flatMap((k) => history(k.record.id, 3, 2, now));
    await runInDurableObject(stub, (_o, state) => {
      undo(state.storage.sql);
      writeAsFd6b3c4(state.storage, { ...first.record, revokedAt: now }, more);
    });
    await evictDurableObject(stub);
    expect(value(await stub.list({ limit: 100, after: null, status: "revoked" })).keys.map((k) => k.record.id)).toEqual([first.record.id]);
    await expectCountedOnce(stub, keys, more, now);
  });

  it("counts in a total budget what d470e17 stored while rolled back to, for a key whose usage older than 400 days was pruned", async () => {
    const stub = env.TENANTS.getByName(`rolled-back-pruned-${crypto.randomUUID()}`);
    const now = Date.now();
    const { key, lookup } = await created(stub, { budget_period: "total", budget_usd: 100 });
    const id = lookup.record.id;
    // A row of 401 days ago, pruned (this release carries it in the total kept alone), and today's.
    const old = [row(id, dayOf(now - 401 * DAY_MS), "m", "gpu-0", 5000, 5000, { costMicros: 500 })];
    const used = history(id, 2, 2, now);
    await stub.record([...old, ...used], []);
    await runInDurableObject(stub, (o: Tenants) => o.alarm());
    // While rolled back: less than what was pruned.
    const more = [row(id, dayOf(now), "m", "gpu-7", 30, 40, { costMicros: 9 })];
    await runInDurableObject(stub, (_o, state) => writeAsD470e17(state.storage.sql, lookup.record, { ...lookup.record, id: "key_unused", expiresAt: null }, more));
    await evictDurableObject(stub);
    expect((await stub.lookup(await keyHash(key)))?.spent).toEqual(expectedSpent([...old, ...used, ...more], "total", now));
  });

  it("costs a batch of this release two rows written more than before step 3, whatever its size: each trigger of spend_check writes once a batch", async () => {
    const stub = env.TENANTS.getByName(`batch-cost-${crypto.randomUUID()}`);
    const now = Date.now();
    const ids = [value(await stub.create({})).lookup.record.id, value(await stub.create({})).lookup.record.id];
    for (const rows of [[row(ids[0] as string, dayOf(now), "m", "gpu-0", 1, 1)], ids.flatMap((id) => history(id, 2, 10, now))]) {
      // New rows, then the same rows again (each an update of its row).
      for (const batch of ["new", "again"]) {
        const written = await rowsWrittenBy(stub, (o) => o.record(rows, [], { from: "group-a", id: `${rows.length} ${batch}` }));
        // Each key: its days, their month (or two, on the first of a month), all time.
        const periods = new Set(rows.flatMap((r) => [`${r.key} ${r.day}`, `${r.key} ${r.day.slice(0, 7)}`, `${r.key} total`])).size;
        // Before step 3: one a usage row, one a key and period, and the sender's. Then spend_check
        // set by the first usage row's write and cleared by the first spend row's.
        expect(written, `${rows.length} ${batch}`).toBe(rows.length + periods + 1 + 2);
      }
    }
  });
});

interface KeyOfPeriod {
  key: string;
  period: BudgetPeriod;
  record: KeyRecord;
  used: UsageRow[];
}

/** A key of each budget period, each with usage of its own stored by this release. */
async function keysOfEveryPeriod(stub: Stub, now: number): Promise<KeyOfPeriod[]> {
  const keys: KeyOfPeriod[] = [];
  for (const period of ["day", "month", "total"] as BudgetPeriod[]) {
    const { key, lookup } = await created(stub, { budget_period: period, budget_usd: 100 });
    const used = history(lookup.record.id, 2, 2, now);
    await stub.record(used, []);
    keys.push({ key, period, record: lookup.record, used });
  }
  return keys;
}

/** Each key's spend is its usage, this release's and `more`, once; and this release's batches after it add once, as before. */
async function expectCountedOnce(stub: Stub, keys: KeyOfPeriod[], more: UsageRow[], now: number): Promise<void> {
  for (const { key, period, record, used } of keys) {
    const all = [...used, ...more.filter((r) => r.key === record.id)];
    expect((await stub.lookup(await keyHash(key)))?.spent, period).toEqual(expectedSpent(all, period, now));
    const after = [row(record.id, dayOf(now), "m", "gpu-0", 1, 1, { costMicros: 1 }), row(record.id, dayOf(now), "m", "gpu-9", 2, 2, { costMicros: 2 })];
    expect((await stub.record(after, []))[record.id], period).toEqual(expectedSpent([...all, ...after], period, now));
  }
}

/** A migrated object as a release of steps 1 and 2 alone left it. */
function toStep2(sql: SqlStorage): void {
  for (const { name } of sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'trigger'").toArray()) sql.exec(`DROP TRIGGER ${name}`);
  sql.exec("DROP TABLE IF EXISTS spend_check");
  sql.exec("UPDATE schema_version SET version = 2");
}

const UPSERT_USAGE = `INSERT INTO usage (key, day, model, backend, prompt_tokens, completion_tokens, cached_tokens, requests, cost_micros)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (key, day, model, backend) DO UPDATE SET
    prompt_tokens = prompt_tokens + excluded.prompt_tokens, completion_tokens = completion_tokens + excluded.completion_tokens,
    cached_tokens = cached_tokens + excluded.cached_tokens, requests = requests + excluded.requests,
    cost_micros = cost_micros + excluded.cost_micros`;

const usageBindings = (r: UsageRow) => [r.key, r.day, r.model, r.backend, r.promptTokens, r.completionTokens, r.cachedTokens, r.requests, r.costMicros];

/** d470e17's revoke (or PATCH), create and record, word for word: it knows no `spend` table and no status columns. */
function writeAsD470e17(sql: SqlStorage, changed: KeyRecord, made: KeyRecord, rows: UsageRow[]): void {
  sql.exec("UPDATE keys SET record = ? WHERE id = ?", JSON.stringify(changed), changed.id);
  sql.exec("INSERT INTO keys (id, hash, record, created_at) VALUES (?, ?, ?, ?)", made.id, `a-hash-of-${made.id}`, JSON.stringify(made), made.createdAt);
  for (const r of rows) sql.exec(UPSERT_USAGE, ...usageBindings(r));
}

/** fd6b3c4's revoke and record, word for word: a batch's usage rows, then its spend rows (one a key and period), in one transaction. */
function writeAsFd6b3c4(storage: DurableObjectStorage, changed: KeyRecord, rows: UsageRow[]): void {
  const sql = storage.sql;
  sql.exec("UPDATE keys SET record = ?, revoked_at = ?, expires_at = ? WHERE id = ?", JSON.stringify(changed), changed.revokedAt, changed.expiresAt, changed.id);
  storage.transactionSync(() => {
    const spend = new Map<string, { tokens: number; costMicros: number }>();
    for (const r of rows) {
      for (const period of [r.day, r.day.slice(0, 7), "total"]) {
        const a = spend.get(`${r.key}\n${period}`) ?? { tokens: 0, costMicros: 0 };
        spend.set(`${r.key}\n${period}`, { tokens: a.tokens + r.promptTokens + r.completionTokens, costMicros: a.costMicros + r.costMicros });
      }
      sql.exec(UPSERT_USAGE, ...usageBindings(r));
    }
    for (const [at, a] of spend) {
      const [key, period] = at.split("\n") as [string, string];
      sql.exec(
        `INSERT INTO spend (key, period, tokens, cost_micros) VALUES (?, ?, ?, ?)
           ON CONFLICT (key, period) DO UPDATE SET tokens = tokens + excluded.tokens, cost_micros = cost_micros + excluded.cost_micros`,
        key, period, a.tokens, a.costMicros,
      );
    }
  });
}
