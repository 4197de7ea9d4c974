import { env, exports } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { adminClient } from "../../cli/admin-client.ts";
import { KEY_COMMANDS } from "../../cli/keys.ts";
import type { UsageView } from "../../src/tenants/admin-api.ts";
import { dayOf } from "../../src/tenants/period.ts";
import type { UsageRow } from "../../src/tenants/protocol.ts";
import { DAY_MS, tenants, usageRow } from "./tenants.ts";

/**
 * A usage listing read a page at a time over UTC midnight: the tenants object's clock (and the
 * admin API's) set a second before midnight, and moved past it once the first page is answered,
 * as a listing that began at 23:59:59 meets it. Every later page must be of the first page's
 * window: its totals and its `since`/`until` are what the listing shows.
 */

const BEFORE_MIDNIGHT = Date.parse("2030-03-10T23:59:59Z");
const AFTER_MIDNIGHT = BEFORE_MIDNIGHT + 2000;

afterEach(() => vi.useRealTimers());

/** The key's rows: 1,200 on the oldest day the first page's window holds, 10 on its last; a page is 1,000 rows unless asked fewer. */
async function keyWithUsage(): Promise<{ id: string; rows: UsageRow[] }> {
  const made = await tenants().create({ name: "read over midnight" });
  if (!made.ok) throw new Error(made.message);
  const id = made.value.lookup.record.id;
  const oldest = dayOf(BEFORE_MIDNIGHT - 400 * DAY_MS);
  const rows: UsageRow[] = [];
  for (let b = 0; b < 1200; b++) rows.push(usageRow(id, oldest, "m", `gpu-${String(b).padStart(4, "0")}`, 10, 1));
  for (let b = 0; b < 10; b++) rows.push(usageRow(id, dayOf(BEFORE_MIDNIGHT), "m", `gpu-${b}`, 10, 1));
  await tenants().record(rows, [], { from: "group-a", id: "before-midnight" });
  return { id, rows };
}

/** What arrives just after midnight: a routing object's batch of the new day. */
async function newDayArrives(id: string): Promise<void> {
  vi.setSystemTime(AFTER_MIDNIGHT);
  const rows = [0, 1, 2].map((b) => usageRow(id, dayOf(AFTER_MIDNIGHT), "m", `gpu-${b}`, 10, 1));
  await tenants().record(rows, [], { from: "group-a", id: "after-midnight" });
}

describe("a key's usage read over UTC midnight", () => {
  it("npx kvgate usage reads every page of the first page's window: no row of its first day skipped, none of the new day added", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(BEFORE_MIDNIGHT);
    const { id, rows } = await keyWithUsage();
    let calls = 0;
    // The CLI's own admin client, its requests answered by the gateway Worker.
    const api = adminClient({ KVGATE_URL: "https://kvgate.test", KVGATE_ADMIN_KEY: env.KVGATE_ADMIN_KEY }, async (input, init) => {
      const res = await exports.default.fetch(new Request(input as string, init));
      if (calls++ === 0) await newDayArrives(id);
      return res;
    });
    const out: string[] = [];
    await KEY_COMMANDS.usage?.(api, { key: id, json: true }, { out: (t) => out.push(t), note: () => undefined, sleep: async () => undefined }, []);
    const u = JSON.parse(out.join("")) as UsageView;
    expect(calls).toBe(2);
    expect({ since: u.since, until: u.until, requests: u.requests }).toEqual({ since: dayOf(BEFORE_MIDNIGHT - 400 * DAY_MS), until: dayOf(BEFORE_MIDNIGHT), requests: rows.length });
    // Before: 1,013 rows — 200 of the oldest day skipped, 3 of a day past `until` added.
    expect(u.by.length).toBe(rows.length);
    expect(u.by.every((r) => r.day >= u.since && r.day <= u.until)).toBe(true);
    expect(u.by.reduce((n, r) => n + r.requests, 0)).toBe(u.requests);
  });
});
