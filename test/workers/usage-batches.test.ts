import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ModelGroup } from "../../durable-objects/model-group.ts";
import type { TenantLedger } from "../../src/tenants/ledger.ts";
import { tenants } from "./tenants.ts";

/**
 * A routing object's usage on its way to the tenants object when much of it waits: after the
 * tenants object was unreachable a while, or in a group with many keys over many backends. Its own
 * file: the usage it stores is large.
 */

/** What a test reads and moves of a routing object: its ledger, and when its usage is next due. */
interface Inside {
  router: { ledger: TenantLedger };
  usageDueAt: number | null;
}

const long = (what: string, i: number) => `${what}-${String(i).padStart(4, "0")}-${"x".repeat(246)}`;

describe("a routing object's usage batches", () => {
  it("are bounded, so usage waiting in rows past one answer's limit still reaches the tenants object, where one batch of it all failed again and again", async () => {
    const keys = Array.from({ length: 600 }, (_, i) => `key_wait${String(i).padStart(4, "0")}`);
    const stub = env.MODEL_GROUP.getByName("usage-backlog");
    // 600 keys over 100 backends each (names as long as a config allows): 60,000 rows, ~38 MB as one batch.
    await runInDurableObject(stub, (o) => {
      const inside = o as unknown as Inside;
      const now = Date.now();
      for (const key of keys) for (let b = 0; b < 100; b++) inside.router.ledger.finished(key, { prompt: 10, completion: 1, cached: 0 }, true, { model: long("model", 0), backend: long("backend", b), costMicros: 3 }, now);
      expect(inside.router.ledger.pendingRows).toBe(60_000);
    });
    // The object's flushes, one after another, as its alarm runs them.
    for (let flush = 0; flush < 60; flush++) {
      const left = await runInDurableObject(stub, async (o) => {
        const inside = o as unknown as Inside;
        inside.usageDueAt = 0;
        await (o as unknown as ModelGroup).alarm();
        return inside.router.ledger.pendingRows;
      });
      if (left === 0) break;
    }
    let requests = 0;
    for (const key of keys) {
      const r = await tenants().usage({ key, since: null, until: null, model: null, limit: 1, after: null });
      if (r.ok) requests += r.value.totals.requests;
    }
    expect(requests).toBe(60_000);
  }, 120_000);
});
