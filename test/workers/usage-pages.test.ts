import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Tenants } from "../../durable-objects/tenants.ts";
import type { UsageView } from "../../src/tenants/admin-api.ts";
import { dayOf } from "../../src/tenants/period.ts";
import type { UsageReport, UsageRow } from "../../src/tenants/protocol.ts";
import { admin, ok, refused } from "./admin.ts";
import { DAY_MS, rowsReadBy, tenants, usageRow } from "./tenants.ts";

/**
 * GET /admin/v1/usage of a key with a year of usage over many backends: its `by` rows in pages,
 * each bounded, its totals over every day asked for. Its own file: the usage it stores is large.
 */

/** Names as long as a config allows (256 characters). */
const long = (what: string, i: number) => `${what}-${String(i).padStart(3, "0")}-${"x".repeat(248)}`;

describe("a key's usage", () => {
  it("comes in pages of rows with the totals of every day, where one answer of every row failed", async () => {
    const made = await tenants().create({ name: "a year on a large fleet" });
    if (!made.ok) throw new Error(made.message);
    const id = made.value.lookup.record.id;
    // 400 days × 2 models × 75 backends: 60,000 rows, ~36 MB as one answer of the tenants object.
    const now = Date.now();
    const all: UsageRow[] = [];
    for (let d = 0; d < 400; d++) for (let m = 0; m < 2; m++) for (let b = 0; b < 75; b++) all.push(usageRow(id, dayOf(now - d * DAY_MS), long("model", m), long("backend", b), 10, 1, { costMicros: 3 }));
    for (let i = 0; i < all.length; i += 5000) await tenants().record(all.slice(i, i + 5000), [], { from: "group-a", id: `batch-${i}` });

    const first = await ok<UsageView>(admin(`/admin/v1/usage?key=${id}`));
    expect(first).toMatchObject({ object: "usage", key: id, prompt_tokens: 600_000, completion_tokens: 60_000, requests: 60_000, cost_usd: 0.18, has_more: true });
    expect(first.by.length).toBe(1000);

    let rows = 0;
    let after: string | null = null;
    let last = "";
    for (;;) {
      const page: UsageView = await ok<UsageView>(admin(`/admin/v1/usage?key=${id}&limit=5000${after === null ? "" : `&after=${encodeURIComponent(after)}`}`));
      expect(page.by.length).toBeLessThanOrEqual(5000);
      expect(page.requests).toBe(60_000);
      for (const r of page.by) {
        const at = `${r.day}\n${r.model}\n${r.backend}`;
        expect(at > last).toBe(true);
        last = at;
      }
      rows += page.by.length;
      if (!page.has_more) break;
      after = page.next_after;
    }
    expect(rows).toBe(60_000);

    const model = await ok<UsageView>(admin(`/admin/v1/usage?key=${id}&model=${long("model", 1)}&since=${dayOf(now - 9 * DAY_MS)}&limit=100`));
    expect(model).toMatchObject({ requests: 750, has_more: true });
    expect(model.by.every((r) => r.model === long("model", 1))).toBe(true);
  }, 120_000);

  it("asked only for an `until` older than the days kept, is an empty page of that day, not a refusal of the `since` left out", async () => {
    const made = await tenants().create({ name: "until long ago" });
    if (!made.ok) throw new Error(made.message);
    const id = made.value.lookup.record.id;
    const until = dayOf(Date.now() - 500 * DAY_MS);
    const page = await ok<UsageView>(admin(`/admin/v1/usage?key=${id}&until=${until}`));
    expect(page).toMatchObject({ object: "usage", key: id, since: until, until, requests: 0, by: [], has_more: false });
  });

  it("refuses a bad limit or cursor by name", async () => {
    for (const limit of ["0", "5001", "ten", "1.5"]) expect((await refused(admin(`/admin/v1/usage?key=key_x&limit=${limit}`), 400)).param).toBe("limit");
    for (const after of ["nonsense", "W10", "WyIyMDI2LTAxLTAxIl0"]) expect((await refused(admin(`/admin/v1/usage?key=key_x&after=${after}`), 400)).param).toBe("after");
  });
});

describe("a key's usage totals on later pages", () => {
  it("are not summed again from every row at each page, and stay exact as usage arrives and old rows are pruned", async () => {
    const stub = tenants();
    const made = await stub.create({ name: "totals once" });
    if (!made.ok) throw new Error(made.message);
    const id = made.value.lookup.record.id;
    const now = Date.now();
    const rows: UsageRow[] = [];
    for (let d = 0; d < 300; d++) for (let b = 0; b < 10; b++) rows.push(usageRow(id, dayOf(now - d * DAY_MS), "m", `gpu-${b}`, 10, 1));
    // One row past the days kept, which the next prune drops.
    const old = usageRow(id, dayOf(now - 401 * DAY_MS), "m", "gpu-0", 10, 1);
    await stub.record([...rows, old], [], { from: "group-a", id: "history" });
    const since = dayOf(now - 402 * DAY_MS);
    const query = (after: UsageReport["rows"][number] | null) => ({ key: id, since, until: null, model: null, limit: 100, after: after && { day: after.day, model: after.model, backend: after.backend } });
    const page = (after: UsageReport["rows"][number] | null) => stub.usage(query(after)).then((r) => (r.ok ? r.value : Promise.reject(new Error(r.message))));

    const first = await page(null);
    expect(first.totals.requests).toBe(3001);
    const at = first.rows.at(-1) as UsageReport["rows"][number];
    const reads = await rowsReadBy(stub, (o) => o.usage(query(at)));
    // The page's rows and the key's, not the 3,001 summed again (3,103 before).
    expect(reads).toBeLessThanOrEqual(110);

    // Usage that arrives between pages counts as it would in a fresh sum: this key's in the window, not another key's.
    await stub.record([usageRow(id, dayOf(now), "m", "gpu-new", 5, 5), usageRow("key_other", dayOf(now), "m", "gpu-0", 5, 5)], [], { from: "group-a", id: "later" });
    const second = await page(at);
    expect(second.totals).toMatchObject({ requests: 3002, promptTokens: 3001 * 10 + 5, completionTokens: 3001 + 5 });
    // Through the admin API, with a model of no rows: its own totals.
    expect((await ok<UsageView>(admin(`/admin/v1/usage?key=${id}&model=none&since=${since}`))).requests).toBe(0);
    // The prune drops the row past the days kept: the next page's totals do not hold it.
    await runInDurableObject(stub, (o: Tenants) => o.alarm());
    expect((await page(at)).totals.requests).toBe(3001);
  });
});
