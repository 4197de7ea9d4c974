import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { TenantsResult } from "../../src/tenants/protocol.ts";
import { tenants } from "./tenants.ts";

/**
 * The origins of live keys (what every isolate asks for, every 10 s, to answer browsers'
 * preflights, which anyone may send) with many keys: asked again with no key changed, the tenants
 * object answers without reading every key again. Its own file: it stores 50,000 keys.
 */

function value<T>(r: TenantsResult<T>): T {
  if (!r.ok) throw new Error(`refused: ${r.status} ${r.message}`);
  return r.value;
}

async function timed<T>(f: () => Promise<T>): Promise<[T, number]> {
  const t = performance.now();
  const v = await f();
  return [v, performance.now() - t];
}

describe("the live keys' origins", () => {
  it("cost a read of every key once, not at each isolate's call, and follow each change of a key", async () => {
    // 50,000 keys as creates leave them (made here in one transaction: as many creates take minutes), one in 100 with an origin.
    const template = value(await tenants().create({ name: "template", models: ["m1", "m2"], rpm: 5, metadata: { team: "search" } })).lookup.record;
    await runInDurableObject(tenants(), (_o, state) => {
      state.storage.transactionSync(() => {
        for (let i = 0; i < 50_000; i++) {
          const id = `key_seed${i}`;
          const record = { ...template, id, origins: i % 100 === 0 ? [`https://o${i}.example`] : [] };
          state.storage.sql.exec("INSERT INTO keys (id, hash, record, created_at) VALUES (?, ?, ?, ?)", id, `seed-hash-${i}`, JSON.stringify(record), template.createdAt + i);
        }
      });
    });

    const [first, cold] = await timed(() => tenants().origins());
    expect(first.length).toBe(500);
    // Ten isolates asking in turn: together less than the one read of every key.
    let warm = 0;
    for (let i = 0; i < 10; i++) {
      const [again, ms] = await timed(() => tenants().origins());
      expect(again.length).toBe(500);
      warm += ms;
    }
    expect(warm, `10 calls took ${warm.toFixed(1)} ms, one read of every key ${cold.toFixed(1)} ms`).toBeLessThan(cold);

    // Every change of a key's origins or life is in the next answer.
    const made = value(await tenants().create({ origins: ["https://new.example"] })).lookup.record.id;
    expect(await tenants().origins()).toContain("https://new.example");
    value(await tenants().update(made, { origins: ["https://moved.example"] }));
    const moved = await tenants().origins();
    expect(moved).toContain("https://moved.example");
    expect(moved).not.toContain("https://new.example");
    value(await tenants().update(made, { expires_at: new Date(Date.now() + 300).toISOString() }));
    expect(await tenants().origins()).toContain("https://moved.example");
    await new Promise((r) => setTimeout(r, 400));
    expect(await tenants().origins()).not.toContain("https://moved.example");
    value(await tenants().update(made, { expires_at: null }));
    expect(await tenants().origins()).toContain("https://moved.example");
    value(await tenants().revoke(made));
    expect(await tenants().origins()).not.toContain("https://moved.example");
    expect((await tenants().origins()).length).toBe(500);
  }, 120_000);
});
