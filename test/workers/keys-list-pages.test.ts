import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { KeyList } from "../../src/tenants/admin-api.ts";
import { admin, ok, refused } from "./admin.ts";
import type { Tenants } from "../../durable-objects/tenants.ts";
import type { KeyRecord } from "../../src/tenants/protocol.ts";
import { inListOrder, rowsReadBy, tenants } from "./tenants.ts";

/**
 * GET /admin/v1/keys with many keys: in pages, each bounded whatever the number of keys, so the
 * list never outgrows what one answer of the tenants object may carry. Its own file: the keys it
 * makes would fill other files' first pages.
 */

/** A key's largest model list: 256 names of 256 characters, ~66 KB a key. */
const MODELS = Array.from({ length: 256 }, (_, i) => `${String(i).padStart(3, "0")}-${"m".repeat(252)}`);

async function make(body: Record<string, unknown>): Promise<string> {
  const r = await tenants().create(body);
  if (!r.ok) throw new Error(r.message);
  return r.value.lookup.record.id;
}

describe("the key list", () => {
  it("is answered in pages with many keys, each key once, oldest first, where one answer of every key failed", async () => {
    // ~36 MB of keys: one answer holding them all is past what the tenants object may send back (a 500).
    const ids: string[] = [];
    for (let i = 0; i < 540; i++) ids.push(await make({ models: MODELS, name: `k${i}` }));

    const first = await ok<KeyList>(admin("/admin/v1/keys"));
    expect(first.data.length).toBe(100);
    expect(first).toMatchObject({ object: "list", has_more: true });

    const seen: { id: string; created: string }[] = [];
    let after: string | null = null;
    let pages = 0;
    for (;;) {
      const page: KeyList = await ok<KeyList>(admin(`/admin/v1/keys?limit=60${after ? `&after=${after}` : ""}`));
      pages++;
      expect(page.data.length).toBeLessThanOrEqual(60);
      seen.push(...page.data.map((k) => ({ id: k.id, created: k.created_at })));
      // A key made while the list is read comes at its end, once.
      if (pages === 2) ids.push(await make({ name: "made while listing" }));
      if (!page.has_more) break;
      after = page.last_id;
    }
    // Each key once; oldest first, keys made in the same millisecond by their id (the list's order).
    expect(seen.map((k) => k.id).sort()).toEqual([...ids].sort());
    const order = [...seen].sort((a, b) => (a.created === b.created ? (a.id < b.id ? -1 : a.id > b.id ? 1 : 0) : a.created < b.created ? -1 : 1));
    expect(seen).toEqual(order);
    expect(seen.at(-1)?.id).toBe(ids.at(-1));
    expect([first.first_id, first.last_id]).toEqual([seen[0]?.id, seen[99]?.id]);
    expect(pages).toBe(10);

    const last = await ok<KeyList>(admin(`/admin/v1/keys?after=${ids.at(-1)}`));
    expect(last).toEqual({ object: "list", data: [], first_id: null, last_id: null, has_more: false });
  }, 60_000);

  it("refuses a bad limit, an after naming no key and an unknown parameter, by name", async () => {
    for (const limit of ["0", "101", "-1", "1.5", "ten", "1e2", "9999999999"]) {
      const e = await refused(admin(`/admin/v1/keys?limit=${limit}`), 400);
      expect({ limit, param: e.param, type: e.type }).toEqual({ limit, param: "limit", type: "invalid_request_error" });
    }
    expect((await refused(admin("/admin/v1/keys?after=key_0000000000000000"), 400)).param).toBe("after");
    expect((await refused(admin("/admin/v1/keys?limt=5"), 400)).param).toBe("limt");
    await make({});
    expect((await ok<KeyList>(admin("/admin/v1/keys?limit=1"))).data.length).toBe(1);
  });
});

describe("the key list of one status", () => {
  it("reads the keys of that status only: a page of the few active keys among 1,000 revoked does not read the revoked", async () => {
    // Its own object: only these keys in it.
    const stub = env.TENANTS.getByName("keys-of-one-status");
    const made: KeyRecord[] = [];
    for (let i = 0; i < 1000; i++) {
      const one = await stub.create({ name: `revoked-${i}` });
      if (!one.ok) throw new Error(one.message);
      const record = one.value.lookup.record;
      if (i % 250 === 0) made.push(record);
      else if (!(await stub.revoke(record.id)).ok) throw new Error("revoke refused");
    }
    const active = inListOrder(made);
    let seen: string[] = [];
    const read = await rowsReadBy(stub, (o) => {
      const page = o.list({ limit: 100, after: null, status: "active" });
      if (!page.ok) throw new Error(page.message);
      seen = page.value.keys.map((k) => k.record.id);
    });
    expect(seen).toEqual(active);
    // The 4 active keys and their spend's rows, not the 996 revoked.
    expect(read).toBeLessThanOrEqual(2 * active.length);
    const revoked = await stub.list({ limit: 3, after: active[0] as string, status: "revoked" });
    expect(revoked.ok && revoked.value.keys.map((k) => k.record.revokedAt !== null)).toEqual([true, true, true]);
  }, 60_000);

  it("tells an expired key from a live one in the index: a page of either reads the row (and record, up to ~70 KB) of the keys it lists alone", async () => {
    // Short-lived keys (one a CI run, `--expires 1d`) pile up expired between the live ones.
    const stub = env.TENANTS.getByName("keys-past-expiry");
    const expired = await expiredKeys(stub, 2000);
    const made: KeyRecord[] = [];
    for (let i = 0; i < 3; i++) {
      const one = await stub.create({ name: `active-${i}` });
      if (!one.ok) throw new Error(one.message);
      made.push(one.value.lookup.record);
    }
    const active = inListOrder(made);
    for (const [status, want] of [
      ["active", active],
      ["expired", expired.slice(0, 100)],
    ] as const) {
      let seen: string[] = [];
      const read = await keyColumnsReadBy(stub, (o) => {
        const page = o.list({ limit: 100, after: null, status });
        if (!page.ok) throw new Error(page.message);
        seen = page.value.keys.map((k) => k.record.id);
      });
      expect(seen, status).toEqual(want);
      // The expiry is read off the index; the table's row only for a key the page lists. (SQLite's
      // rowsRead still counts every index entry stepped over: the list's order is by age, and
      // which keys have expired changes with the clock, so no index skips them.)
      expect(read, status).toEqual(["record"]);
    }
  }, 60_000);

  it("a live object of the schema before (its keys indexed without their expiry) is brought to it on its next start, its keys and pages as they were", async () => {
    const stub = env.TENANTS.getByName("keys-index-migrated");
    const expired = await expiredKeys(stub, 50);
    const live = await stub.create({ name: "live" });
    const revoked = await stub.create({ name: "revoked" });
    if (!live.ok || !revoked.ok) throw new Error("create refused");
    await stub.revoke(revoked.value.lookup.record.id);
    const ids = (status: "active" | "revoked" | "expired", limit = 100) => stub.list({ limit, after: null, status }).then((r) => (r.ok ? r.value.keys.map((k) => k.record.id) : []));
    // The object as step 3 left it: step 2's index of the keys not revoked, and its version.
    await runInDurableObject(stub, (_o, state) => {
      const sql = state.storage.sql;
      sql.exec("DROP INDEX keys_unrevoked_by_age_expiry");
      sql.exec("CREATE INDEX keys_unrevoked_by_age ON keys (created_at, id) WHERE revoked_at IS NULL");
      sql.exec("UPDATE schema_version SET version = 3");
    });
    expect(await ids("active")).toEqual([live.value.lookup.record.id]);
    await evictDurableObject(stub);
    expect(await ids("active")).toEqual([live.value.lookup.record.id]);
    expect(await ids("expired", 20)).toEqual(expired.slice(0, 20));
    expect(await ids("revoked")).toEqual([revoked.value.lookup.record.id]);
    await runInDurableObject(stub, (_o, state) => {
      const sql = state.storage.sql;
      expect(sql.exec<{ version: number }>("SELECT version FROM schema_version").one().version).toBe(4);
      const indexes = sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'keys' AND name LIKE 'keys_%' ORDER BY name").toArray().map((r) => r.name);
      expect(indexes).toEqual(["keys_by_age", "keys_revoked_by_age", "keys_unrevoked_by_age_expiry"]);
    });
    // A key made and one expired after the step are in its index as any other.
    const later = await stub.create({ name: "later" });
    if (!later.ok) throw new Error(later.message);
    expect(await ids("active")).toEqual(inListOrder([live.value.lookup.record, later.value.lookup.record]));
  }, 60_000);
});

/** `n` keys made in `stub` that have expired (written as a release's create stores them, their expiry set past), oldest first. */
async function expiredKeys(stub: DurableObjectStub<Tenants>, n: number): Promise<string[]> {
  const template = await stub.create({ name: "template" });
  if (!template.ok) throw new Error(template.message);
  const record = template.value.lookup.record;
  const now = Date.now();
  const ids = Array.from({ length: n }, (_, i) => `key_expired${String(i).padStart(6, "0")}`);
  await runInDurableObject(stub, (_o, state) => {
    const sql = state.storage.sql;
    sql.exec("DELETE FROM keys WHERE id = ?", record.id);
    for (const [i, id] of ids.entries()) {
      // The status columns as a release before step 2 leaves them: the triggers of step 3 set them from the record.
      sql.exec("INSERT INTO keys (id, hash, record, created_at) VALUES (?, ?, ?, ?)", id, `hash-of-${id}`, JSON.stringify({ ...record, id, expiresAt: now - 1000 }), now - 10_000 + i);
    }
  });
  return ids;
}

/**
 * The columns of the keys table (not of one of its indexes) SQLite reads to run the statements
 * `f` sends that read keys, as their bytecode says (EXPLAIN): `record` alone when a page's
 * condition is decided in the index, `expires_at` too when each key passed over is looked up.
 */
function keyColumnsReadBy(stub: DurableObjectStub<Tenants>, f: (o: Tenants) => unknown): Promise<string[]> {
  return runInDurableObject(stub, async (o: Tenants, state) => {
    const sql = state.storage.sql;
    const exec = sql.exec;
    const sent: [string, unknown[]][] = [];
    sql.exec = ((query: string, ...bindings: unknown[]) => {
      if (/\bFROM keys\b/.test(query)) sent.push([query, bindings]);
      return exec.call(sql, query, ...bindings);
    }) as typeof sql.exec;
    try {
      await f(o);
    } finally {
      sql.exec = exec;
    }
    const root = sql.exec<{ rootpage: number }>("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'keys'").one().rootpage;
    const names = sql.exec("SELECT * FROM keys LIMIT 0").columnNames;
    const read = new Set<string>();
    for (const [query, bindings] of sent) {
      const ops = sql.exec<{ opcode: string; p1: number; p2: number }>(`EXPLAIN ${query}`, ...bindings).toArray();
      const tableCursors = new Set(ops.filter((op) => op.opcode === "OpenRead" && op.p2 === root).map((op) => op.p1));
      for (const op of ops) if (op.opcode === "Column" && tableCursors.has(op.p1)) read.add(names[op.p2] as string);
    }
    return [...read].sort();
  });
}
