import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { KeyList } from "../../src/tenants/admin-api.ts";
import { admin, ok, refused } from "./admin.ts";
import { rowsReadBy, tenants } from "./tenants.ts";

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
    const active: string[] = [];
    for (let i = 0; i < 1000; i++) {
      const made = await stub.create({ name: `revoked-${i}` });
      if (!made.ok) throw new Error(made.message);
      const id = made.value.lookup.record.id;
      if (i % 250 === 0) active.push(id);
      else if (!(await stub.revoke(id)).ok) throw new Error("revoke refused");
    }
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
});
