import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { TenantsResult } from "../../src/tenants/protocol.ts";
import { tenants } from "./tenants.ts";

/**
 * The keys' origins (what every isolate asks for, every 10 s, to answer browsers' preflights,
 * which anyone may send) with many keys: asked again with no key changed, the tenants object
 * answers without reading every key again. Its own file: it stores many keys.
 */

function value<T>(r: TenantsResult<T>): T {
  if (!r.ok) throw new Error(`refused: ${r.status} ${r.message}`);
  return r.value;
}

describe("the keys' origins", () => {
  it("cost a read of every key once, not at each isolate's call, and follow each change of a key's origins, not of its life", async () => {
    // 5,000 keys as creates leave them (made here in one transaction: as many creates take a while), one in 100 with an origin.
    const template = value(await tenants().create({ name: "template", models: ["m1", "m2"], rpm: 5, metadata: { team: "search" } })).lookup.record;
    const insert = (i: number, origins: string[]) =>
      runInDurableObject(tenants(), (_o, state) => {
        const id = `key_seed${i}`;
        state.storage.sql.exec("INSERT INTO keys (id, hash, record, created_at) VALUES (?, ?, ?, ?)", id, `seed-hash-${i}`, JSON.stringify({ ...template, id, origins }), template.createdAt + i);
      });
    await runInDurableObject(tenants(), (_o, state) => {
      state.storage.transactionSync(() => {
        for (let i = 0; i < 5_000; i++) {
          const id = `key_seed${i}`;
          const record = { ...template, id, origins: i % 100 === 0 ? [`https://o${i}.example`] : [] };
          state.storage.sql.exec("INSERT INTO keys (id, hash, record, created_at) VALUES (?, ?, ?, ?)", id, `seed-hash-${i}`, JSON.stringify(record), template.createdAt + i);
        }
      });
    });

    expect((await tenants().origins()).length).toBe(50);
    // A key written to storage behind the object's back, as no create or update writes one: the
    // isolates' next calls are answered from what the object kept, not from a read of every key.
    await insert(5_000, ["https://behind.example"]);
    for (let i = 0; i < 10; i++) expect(await tenants().origins()).not.toContain("https://behind.example");

    // A key made is in the next answer, added to what the object kept: no read of every key (the
    // key behind its back stays unseen).
    const made = value(await tenants().create({ origins: ["https://new.example"] })).lookup.record.id;
    const afterCreate = await tenants().origins();
    expect(afterCreate).toContain("https://new.example");
    expect(afterCreate).not.toContain("https://behind.example");
    // An origin a key no longer names may be no other key's: every key is read again (the key behind its back shows now).
    value(await tenants().update(made, { origins: ["https://moved.example"] }));
    const moved = await tenants().origins();
    expect(moved).toEqual(expect.arrayContaining(["https://moved.example", "https://behind.example"]));
    expect(moved).not.toContain("https://new.example");
    // A key's life is no change of them: its page keeps the preflight its 401 needs. An expiry
    // (set with a margin a loaded machine's update survives: one already past is refused) is not
    // even a write: past it, the object still answers from what it kept.
    const expiresAt = Date.now() + 5000;
    value(await tenants().update(made, { expires_at: new Date(expiresAt).toISOString() }));
    expect(await tenants().origins()).toContain("https://moved.example");
    await insert(5_001, ["https://behind-again.example"]);
    await new Promise((r) => setTimeout(r, expiresAt + 100 - Date.now()));
    const expired = await tenants().origins();
    expect(expired).toContain("https://moved.example");
    expect(expired).not.toContain("https://behind-again.example");
    // Nor is a revocation: no origin changes, nothing is read again.
    value(await tenants().revoke(made));
    const revoked = await tenants().origins();
    expect(revoked).toContain("https://moved.example");
    expect(revoked).not.toContain("https://behind-again.example");
    expect(revoked.length).toBe(52);
  }, 120_000);
});
