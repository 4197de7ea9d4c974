import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { IssuedKeyView, KeyList, KeyView, UsageView } from "../../src/tenants/admin-api.ts";
import { keyHash, looksLikeVirtualKey, prefixOf } from "../../src/tenants/key-format.ts";
import { dayOf, periodOf } from "../../src/tenants/period.ts";
import type { UsageRow } from "../../src/tenants/protocol.ts";
import { admin, ok, refused } from "./admin.ts";
import { EVENTUALLY, gateway } from "./gateway.ts";
import { DAY_MS, tenants, usageRow } from "./tenants.ts";

/**
 * The admin API's virtual keys and usage (/admin/v1/keys, /admin/v1/usage), in the Workers
 * runtime: what a key looks like to an operator (never the key, once it is shown), every bad
 * field refused by name, and usage as the routing objects' batches left it.
 */


const create = (json: unknown) => ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json }), 201);

describe("creating a key", () => {
  it("shows the key once; get and list show its prefix and never the key nor its hash", async () => {
    const made = await create({ name: "web app", models: ["routing"], rpm: 60, tpm: 10_000, max_parallel: 4, budget_tokens: 1_000_000, budget_usd: 12.5, budget_period: "day", origins: ["https://app.example", "http://localhost:5173"], metadata: { team: "search", user: "ana" }, track_usage: false });
    expect(looksLikeVirtualKey(made.key)).toBe(true);
    const hash = await keyHash(made.key);
    const { key, ...view } = made;
    expect(key).toBe(made.key);
    expect(view).toEqual({
      id: expect.stringMatching(/^key_[0-9a-f]{16}$/),
      object: "key",
      prefix: prefixOf(made.key),
      name: "web app",
      metadata: { team: "search", user: "ana" },
      models: ["routing"],
      rpm: 60,
      tpm: 10_000,
      max_parallel: 4,
      budget_tokens: 1_000_000,
      budget_usd: 12.5,
      budget_period: "day",
      origins: ["https://app.example", "http://localhost:5173"],
      track_usage: false,
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      expires_at: null,
      revoked_at: null,
      status: "active",
      spent: { period: dayOf(Date.now()), tokens: 0, cost_usd: 0 },
    } satisfies KeyView);

    const got = await ok<KeyView>(admin(`/admin/v1/keys/${made.id}`));
    expect(got).toEqual(view);
    const list = await ok<KeyList>(admin("/admin/v1/keys"));
    expect(list.object).toBe("list");
    expect(list.data.find((k) => k.id === made.id)).toEqual(view);
    for (const text of [JSON.stringify(got), JSON.stringify(list)]) {
      expect(text).not.toContain(made.key);
      expect(text).not.toContain(made.key.slice(prefixOf(made.key).length));
      expect(text).not.toContain(hash);
    }
  });

  it("takes an empty body as a key with no limits, every model, a monthly period and usage tracked", async () => {
    const res = await admin("/admin/v1/keys", { method: "POST" });
    const made = await ok<IssuedKeyView>(res, 201);
    expect(made).toMatchObject({ models: [], rpm: null, tpm: null, max_parallel: null, budget_tokens: null, budget_usd: null, budget_period: "month", origins: [], track_usage: true, metadata: {}, name: null, status: "active" });
    expect(made.spent.period).toBe(periodOf("month", Date.now()));
  });

  it("takes a chunked body with no bytes, or only whitespace, as no body: a key with no limits", async () => {
    for (const sent of [[], [" \n"]]) {
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          for (const text of sent) c.enqueue(new TextEncoder().encode(text));
          c.close();
        },
      });
      const made = await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", body, duplex: "half" } as RequestInit), 201);
      expect(made).toMatchObject({ models: [], rpm: null, budget_period: "month", status: "active" });
    }
  });

  it("refuses every bad field with a 400 naming it, and makes no key", async () => {
    const before = (await ok<KeyList>(admin("/admin/v1/keys"))).data.length;
    const bad: [unknown, string | null][] = [
      [{ models: "llama" }, "models"],
      [{ models: [""] }, "models[0]"],
      [{ models: [7] }, "models[0]"],
      [{ rpm: 0 }, "rpm"],
      [{ rpm: 1.5 }, "rpm"],
      [{ rpm: "60" }, "rpm"],
      [{ tpm: -1 }, "tpm"],
      [{ max_parallel: 0 }, "max_parallel"],
      [{ budget_tokens: 0 }, "budget_tokens"],
      [{ budget_usd: 0 }, "budget_usd"],
      [{ budget_usd: -5 }, "budget_usd"],
      [{ budget_period: "week" }, "budget_period"],
      [{ origins: "https://app.example" }, "origins"],
      [{ origins: ["*"] }, "origins[0]"],
      [{ origins: ["https://app.example/"] }, "origins[0]"],
      [{ origins: ["https://app.example/path"] }, "origins[0]"],
      [{ origins: ["app.example"] }, "origins[0]"],
      [{ origins: ["https://ok.example", "ftp://files.example"] }, "origins[1]"],
      [{ expires_at: "tomorrow" }, "expires_at"],
      [{ expires_at: "2027-02-30" }, "expires_at"],
      // A timestamp on a day no month has, which Date.parse would roll over into the next month.
      [{ expires_at: "2027-02-30T00:00:00Z" }, "expires_at"],
      [{ expires_at: "2027-04-31T10:00:00+02:00" }, "expires_at"],
      [{ expires_at: "2027-01-01T00:00:00" }, "expires_at"],
      [{ expires_at: "2020-01-01T00:00:00Z" }, "expires_at"],
      // Today: a day is its first instant, 00:00 UTC, already past (README says so).
      [{ expires_at: dayOf(Date.now()) }, "expires_at"],
      // An instant in the year 10000, which the view would show as +010000-01-01T23:58:59.000Z: a value this field refuses.
      [{ expires_at: "9999-12-31T23:59:59-23:59" }, "expires_at"],
      [{ name: "" }, "name"],
      [{ name: 5 }, "name"],
      [{ metadata: { team: 5 } }, "metadata.team"],
      [{ metadata: { "a b": "x" } }, "metadata.a b"],
      [{ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }, "metadata"],
      [{ metadata: ["team"] }, "metadata"],
      // Parsed into an object, such a label would be dropped without a word (it is the prototype's setter).
      [{ metadata: JSON.parse('{"__proto__": "x", "team": "a"}') as unknown }, "metadata.__proto__"],
      [{ track_usage: "no" }, "track_usage"],
      [{ rpm: 5, rpmm: 5 }, "rpmm"],
      [{ budgetTokens: 5 }, "budgetTokens"],
    ];
    for (const [json, param] of bad) {
      const e = await refused(admin("/admin/v1/keys", { method: "POST", json }), 400);
      expect({ json, param: e.param, type: e.type }).toEqual({ json, param, type: "invalid_request_error" });
      expect(e.message, JSON.stringify(json)).toContain(param);
    }
    for (const body of ["[]", "null", '"key"', "{", '{"rpm": 1'])
      expect((await refused(gateway("/admin/v1/keys", { method: "POST", body, headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}`, "content-type": "application/json" } }), 400)).type).toBe("invalid_request_error");
    expect((await ok<KeyList>(admin("/admin/v1/keys"))).data.length).toBe(before);
  });
});

describe("changing a key", () => {
  it("updates only the fields a patch names; null clears a limit", async () => {
    const made = await create({ rpm: 10, tpm: 100, models: ["a"], name: "before", metadata: { team: "x" } });
    const patched = await ok<KeyView>(admin(`/admin/v1/keys/${made.id}`, { method: "PATCH", json: { rpm: null, budget_usd: 3, name: "after", expires_at: "2099-01-01" } }));
    expect(patched).toMatchObject({ rpm: null, tpm: 100, models: ["a"], budget_usd: 3, name: "after", metadata: { team: "x" }, expires_at: "2099-01-01T00:00:00.000Z", status: "active" });
    expect(await ok<KeyView>(admin(`/admin/v1/keys/${made.id}`))).toEqual(patched);
    const lookup = await tenants().lookup(await keyHash(made.key));
    expect(lookup?.record).toMatchObject({ rpm: null, tpm: 100, budgetUsd: 3 });

    expect((await refused(admin(`/admin/v1/keys/${made.id}`, { method: "PATCH", json: {} }), 400)).message).toContain("names no field");
    expect((await refused(admin(`/admin/v1/keys/${made.id}`, { method: "PATCH", json: { tpm: 0 } }), 400)).param).toBe("tpm");
    expect((await refused(admin(`/admin/v1/keys/${made.id}`, { method: "PATCH", json: { id: "key_other" } }), 400)).param).toBe("id");
    expect((await ok<KeyView>(admin(`/admin/v1/keys/${made.id}`))).tpm).toBe(100);
  });

  it("a key past its expiry says expired", async () => {
    // A margin a loaded machine's create survives: an expiry already past when it lands is refused.
    const made = await create({ expires_at: new Date(Date.now() + 3000).toISOString() });
    expect(made.status).toBe("active");
    await vi.waitFor(async () => expect((await ok<KeyView>(admin(`/admin/v1/keys/${made.id}`))).status).toBe("expired"), EVENTUALLY);
  }, 30_000);

  it("revoke: status revoked, the hash still finds it (as revoked); rotate: a new key, the old hash finds nothing", async () => {
    const made = await create({ rpm: 7 });
    const rotated = await ok<IssuedKeyView>(admin(`/admin/v1/keys/${made.id}/rotate`, { method: "POST" }));
    expect(looksLikeVirtualKey(rotated.key)).toBe(true);
    expect(rotated.key).not.toBe(made.key);
    expect(rotated).toMatchObject({ id: made.id, prefix: prefixOf(rotated.key), rpm: 7, status: "active", created_at: made.created_at });
    expect(await tenants().lookup(await keyHash(made.key))).toBeNull();
    expect((await tenants().lookup(await keyHash(rotated.key)))?.record.id).toBe(made.id);
    expect(JSON.stringify(await ok<KeyView>(admin(`/admin/v1/keys/${made.id}`)))).not.toContain(rotated.key);

    const revoked = await ok<KeyView>(admin(`/admin/v1/keys/${made.id}/revoke`, { method: "POST" }));
    expect(revoked.status).toBe("revoked");
    expect(revoked.revoked_at).toMatch(/^\d{4}-/);
    expect((await tenants().lookup(await keyHash(rotated.key)))?.record.revokedAt).toBe(Date.parse(revoked.revoked_at as string));
    // Again: no change.
    expect(await ok<KeyView>(admin(`/admin/v1/keys/${made.id}/revoke`, { method: "POST" }))).toEqual(revoked);
    const e = await refused(admin(`/admin/v1/keys/${made.id}/rotate`, { method: "POST" }), 409);
    expect(e.code).toBe("key_revoked");
  });

  it("an unknown id is a 404 on every route", async () => {
    // param names where the id was given: the path's {id}, or usage's ?key=.
    for (const [method, path, json, param] of [
      ["GET", "/admin/v1/keys/key_nope", undefined, "id"],
      ["PATCH", "/admin/v1/keys/key_nope", { rpm: 1 }, "id"],
      ["POST", "/admin/v1/keys/key_nope/revoke", undefined, "id"],
      ["POST", "/admin/v1/keys/key_nope/rotate", undefined, "id"],
      ["GET", "/admin/v1/usage?key=key_nope", undefined, "key"],
    ] as const) {
      const e = await refused(admin(path, { method, json }), 404);
      expect(e).toMatchObject({ type: "not_found_error", code: "key_not_found", param });
      expect(e.message).toContain("key_nope");
    }
  });
});

describe("usage", () => {
  it("reports the routing objects' batches exactly: totals, per day, model and backend, within since and until", async () => {
    const made = await create({ budget_period: "month" });
    const now = Date.now();
    const today = dayOf(now);
    const earlier = dayOf(now - 2 * DAY_MS);
    const batches: UsageRow[][] = [
      [usageRow(made.id, today, "llama", "gpu-0", 120, 30, { cachedTokens: 64, costMicros: 1500 }), usageRow(made.id, earlier, "llama", "gpu-1", 10, 1, { cachedTokens: 0, costMicros: 12 })],
      [usageRow(made.id, today, "llama", "gpu-0", 80, 20, { cachedTokens: 64, costMicros: 1000 }), usageRow(made.id, today, "qwen", "gpu-9", 5, 5, { cachedTokens: 0, costMicros: 10 })],
    ];
    for (const b of batches) await tenants().record(b, []);

    const all = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}`));
    expect(all).toMatchObject({ object: "usage", key: made.id, until: today, model: null, prompt_tokens: 215, completion_tokens: 56, cached_tokens: 128, requests: 4, cost_usd: 0.002522 });
    expect(all.by).toEqual([
      { day: earlier, model: "llama", backend: "gpu-1", prompt_tokens: 10, completion_tokens: 1, cached_tokens: 0, requests: 1, cost_usd: 0.000012 },
      { day: today, model: "llama", backend: "gpu-0", prompt_tokens: 200, completion_tokens: 50, cached_tokens: 128, requests: 2, cost_usd: 0.0025 },
      { day: today, model: "qwen", backend: "gpu-9", prompt_tokens: 5, completion_tokens: 5, cached_tokens: 0, requests: 1, cost_usd: 0.00001 },
    ]);

    // A timestamp counts its whole UTC day: since the last second of today is all of today.
    const todayOnly = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}&since=${today}T23:59:59Z`));
    expect([todayOnly.since, todayOnly.prompt_tokens, todayOnly.requests]).toEqual([today, 205, 3]);
    const qwen = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}&model=qwen`));
    expect([qwen.prompt_tokens, qwen.by.length]).toEqual([5, 1]);
    const before = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}&until=${earlier}`));
    expect([before.prompt_tokens, before.completion_tokens, before.cached_tokens, before.requests]).toEqual([10, 1, 0, 1]);
    const none = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}&since=2000-01-01&until=2000-01-31`));
    expect([none.prompt_tokens, none.completion_tokens, none.cached_tokens, none.requests, none.by]).toEqual([0, 0, 0, 0, []]);

    // The key's spend in its period is the same figures.
    const view = await ok<KeyView>(admin(`/admin/v1/keys/${made.id}`));
    const inMonth = batches.flat().filter((r) => r.day >= `${periodOf("month", now)}-01`);
    expect(view.spent).toEqual({ period: periodOf("month", now), tokens: inMonth.reduce((n, r) => n + r.promptTokens + r.completionTokens, 0), cost_usd: inMonth.reduce((n, r) => n + r.costMicros, 0) / 1e6 });
  });

  it("reads a group's usage by one of its aliases, the name a key's clients call it by (usage is kept under the group's name)", async () => {
    const made = await create({});
    const today = dayOf(Date.now());
    await tenants().record([usageRow(made.id, today, "routing", "gpu-0", 40, 10, { cachedTokens: 0, costMicros: 0 })], []);
    for (const model of ["routing", "routing-alias"]) {
      const u = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}&model=${model}`));
      expect({ model, asked: u.model, prompt: u.prompt_tokens, rows: u.by.map((r) => r.model) }).toEqual({ model, asked: "routing", prompt: 40, rows: ["routing"] });
    }
    // A name no group has (a removed group's) is read as given.
    const gone = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}&model=retired-group`));
    expect([gone.model, gone.prompt_tokens]).toEqual(["retired-group", 0]);
  });

  it("a new key's usage is zero", async () => {
    const made = await create({});
    const u = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}`));
    expect([u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.requests, u.cost_usd, u.by]).toEqual([0, 0, 0, 0, 0, []]);
  });

  it("refuses a bad query with a 400 naming the parameter", async () => {
    const made = await create({});
    for (const [query, param] of [
      ["", "key"],
      [`key=${made.id}&since=yesterday`, "since"],
      [`key=${made.id}&until=2026-13-01`, "until"],
      [`key=${made.id}&since=2026-02-30T00:00:00Z`, "since"],
      [`key=${made.id}&since=2026-05-02&until=2026-05-01`, "since"],
      [`key=${made.id}&from=2026-05-01`, "from"],
    ] as const) {
      const e = await refused(admin(`/admin/v1/usage?${query}`), 400);
      expect({ query, param: e.param }).toEqual({ query, param });
    }
  });
});

describe("who may manage keys", () => {
  it("the admin key only: the master key, a virtual key and no key get 401", async () => {
    const made = await create({});
    for (const key of [env.KVGATE_MASTER_KEY, made.key, ""]) {
      for (const [method, path] of [
        ["GET", "/admin/v1/keys"],
        ["POST", "/admin/v1/keys"],
        ["GET", `/admin/v1/keys/${made.id}`],
        ["POST", `/admin/v1/keys/${made.id}/rotate`],
        ["GET", `/admin/v1/usage?key=${made.id}`],
      ] as const) {
        const e = await refused(admin(path, { method }, key), 401);
        expect(e.type).toBe("authentication_error");
        if (key !== "") expect(JSON.stringify(e)).not.toContain(key);
      }
    }
    // Nothing changed: the key was not rotated.
    expect((await tenants().lookup(await keyHash(made.key)))?.record.id).toBe(made.id);
  });
});
