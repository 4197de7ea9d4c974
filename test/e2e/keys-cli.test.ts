import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { freePort } from "../../bench/harness/free-port.ts";
import type { IssuedKeyView, KeyList, KeyView, UsageView } from "../../src/tenants/admin-api.ts";
import { looksLikeVirtualKey } from "../../src/tenants/key-format.ts";
import { dayOf } from "../../src/tenants/period.ts";
import { kvgate as runKvgate, npmStart, type NpmStart, type Ran } from "./npm-start-cli.ts";

/**
 * Virtual keys as an operator manages them: `npm start`, then `npx kvgate keys …` and `npx kvgate
 * usage` as typed, with KVGATE_URL and KVGATE_ADMIN_KEY. Scripts read the --json output, so its
 * shape is held here; the key itself appears in create's and rotate's output only.
 */

let gateway: NpmStart;

const kvgate = (args: string[], adminKey?: string): Promise<Ran> => runKvgate(args, { KVGATE_URL: gateway.url, KVGATE_ADMIN_KEY: adminKey ?? gateway.keys.admin });

/** A command that must succeed; its stdout. */
async function done(args: string[]): Promise<string> {
  const r = await kvgate(args);
  expect(r.stderr, args.join(" ")).toEqual([]);
  expect(r.code, args.join(" ")).toBe(0);
  return r.stdout;
}

const json = async <T>(args: string[]): Promise<T> => JSON.parse(await done([...args, "--json"])) as T;

beforeAll(async () => {
  gateway = await npmStart();
}, 60_000);

afterAll(() => {
  gateway?.stop();
});

describe("npx kvgate keys", () => {
  it("create --json prints the key once with its id; list and show never print it", async () => {
    const made = await json<IssuedKeyView>(["keys", "create", "--models", "kvgate-sim,other", "--rpm", "60", "--tpm", "10000", "--max-parallel", "4", "--budget-tokens", "100000", "--origins", "https://app.example,http://localhost:5173", "--name", "web", "--team", "search", "--user", "ana", "--period", "day"]);
    expect(looksLikeVirtualKey(made.key)).toBe(true);
    expect(made).toMatchObject({ id: expect.stringMatching(/^key_/), models: ["kvgate-sim", "other"], rpm: 60, tpm: 10000, max_parallel: 4, budget_tokens: 100000, budget_period: "day", origins: ["https://app.example", "http://localhost:5173"], name: "web", metadata: { team: "search", user: "ana" }, track_usage: true, status: "active" });
    expect(made.key.startsWith(made.prefix)).toBe(true);

    const list = await json<KeyList>(["keys", "list"]);
    expect(list.data.find((k) => k.id === made.id)).toMatchObject({ prefix: made.prefix, rpm: 60 });
    const table = await done(["keys", "list"]);
    expect(table).toMatch(/^ID\s+PREFIX\s+NAME\s+STATUS\s+MODELS\s+LIMITS\s+SPENT/);
    expect(table).toMatch(new RegExp(`^${made.id}\\s+${made.prefix}\\s+web\\s+active\\s+kvgate-sim,other\\s+rpm 60, tpm 10000, parallel 4, budget 100000 tokens a day\\s+0 tokens`, "m"));
    const shown = await json<KeyView>(["keys", "show", made.id]);
    expect(shown).toEqual((({ key: _key, ...view }) => view)(made));
    const shownPlain = await done(["keys", "show", made.id]);
    expect(shownPlain).toContain(`prefix    ${made.prefix}`);
    for (const out of [JSON.stringify(list), table, JSON.stringify(shown), shownPlain]) expect(out).not.toContain(made.key);
  }, 60_000);

  it("create without --json shows the key once and says it will not be shown again", async () => {
    const out = await done(["keys", "create", "--no-usage", "--expires", "30d", "--budget-usd", "2.5"]);
    const key = /^ {2}(sk-kvg-\S+)$/m.exec(out)?.[1] ?? "";
    expect(looksLikeVirtualKey(key)).toBe(true);
    expect(out.split(key).length).toBe(2);
    expect(out).toContain("it will not be shown again");
    expect(out).toMatch(/usage\s+not tracked/);
    expect(out).toMatch(/limits\s+budget \$2\.5 a month/);
    const expires = Date.parse(/^expires\s+(\S+)$/m.exec(out)?.[1] ?? "");
    expect(Math.abs(expires - (Date.now() + 30 * 86_400_000))).toBeLessThan(120_000);
  }, 30_000);

  it("create refuses an empty --models or --origins, which the API reads as no restriction: a script's empty variable made a key for every model", async () => {
    const before = (await json<KeyList>(["keys", "list"])).data.length;
    for (const args of [["--models", ""], ["--models", " , "], ["--origins", ""]]) {
      const r = await kvgate(["keys", "create", ...args, "--json"]);
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: "" });
      expect(r.stderr[0]).toMatch(new RegExp(`^kvgate: ${args[0]} names no `));
    }
    expect((await json<KeyList>(["keys", "list"])).data.length).toBe(before);
  }, 60_000);

  it("update refuses an empty --models or --origins too, and lifts a restriction only when told so in words: --models all, --origins any", async () => {
    const made = await json<IssuedKeyView>(["keys", "create", "--models", "kvgate-sim", "--origins", "https://app.example"]);
    for (const args of [["--models", ""], ["--origins", " , "]]) {
      const r = await kvgate(["keys", "update", made.id, ...args, "--json"]);
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: "" });
      expect(r.stderr[0]).toMatch(new RegExp(`^kvgate: ${args[0]} names no .*${args[0] === "--models" ? "--models all" : "--origins any"}`));
    }
    // The key kept both restrictions.
    expect(await json<KeyView>(["keys", "show", made.id])).toMatchObject({ models: ["kvgate-sim"], origins: ["https://app.example"] });
    const lifted = await json<KeyView>(["keys", "update", made.id, "--models", "all", "--origins", "any"]);
    expect(lifted).toMatchObject({ models: [], origins: [] });
  }, 60_000);

  it("update changes what its flags name; none clears a limit and --team keeps the other labels", async () => {
    const made = await json<IssuedKeyView>(["keys", "create", "--rpm", "5", "--tpm", "50", "--team", "a", "--user", "u"]);
    const updated = await json<KeyView>(["keys", "update", made.id, "--rpm", "none", "--team", "b", "--models", "kvgate-sim"]);
    expect(updated).toMatchObject({ rpm: null, tpm: 50, metadata: { team: "b", user: "u" }, models: ["kvgate-sim"] });
  }, 30_000);

  it("update --usage tracks usage again after --no-usage, and --name none clears the name (found by review: neither could be undone from the CLI)", async () => {
    const made = await json<IssuedKeyView>(["keys", "create", "--no-usage", "--name", "batch job"]);
    expect(made).toMatchObject({ track_usage: false, name: "batch job" });
    expect(await json<KeyView>(["keys", "update", made.id, "--usage", "--name", "none"])).toMatchObject({ track_usage: true, name: null });
    const both = await kvgate(["keys", "update", made.id, "--usage", "--no-usage", "--json"]);
    expect({ code: both.code, stderr: both.stderr[0] }).toEqual({ code: 2, stderr: "kvgate: --usage and --no-usage say opposite things: give one" });
  }, 30_000);

  it("rotate gives a different key for the same id; revoke makes show say revoked", async () => {
    const made = await json<IssuedKeyView>(["keys", "create"]);
    const rotated = await json<IssuedKeyView>(["keys", "rotate", made.id]);
    expect(rotated.id).toBe(made.id);
    expect(looksLikeVirtualKey(rotated.key)).toBe(true);
    expect(rotated.key).not.toBe(made.key);

    const revoked = await done(["keys", "revoke", made.id]);
    expect(revoked).toMatch(new RegExp(`^revoked ${made.id} \\(${rotated.prefix}\\)`));
    const shown = await json<KeyView>(["keys", "show", made.id]);
    expect(shown.status).toBe("revoked");
    expect(shown.revoked_at).not.toBeNull();
    // A revoked key is not given a new secret.
    const again = await kvgate(["keys", "rotate", made.id]);
    expect(again.code).toBe(1);
    expect(again.stderr).toEqual([expect.stringMatching(new RegExp(`^kvgate: POST /admin/v1/keys/${made.id}/rotate: 409 key "${made.id}" is revoked`))]);
  }, 60_000);

  it("rotate and revoke say the old key stops working within 10 s, not at once: an isolate that read it lately still takes it", async () => {
    const made = await json<IssuedKeyView>(["keys", "create"]);
    const models = (key: string) => fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status);
    expect(await models(made.key)).toBe(200);
    const usedAt = Date.now();

    const rotated = await done(["keys", "rotate", made.id]);
    // What the operator reads right after a rotation of a leaked key must not promise more than holds.
    if (Date.now() - usedAt < 5_000) expect(await models(made.key)).toBe(200);
    expect(rotated.split("\n")[0]).toMatch(/^rotated key \(the old key stops working within 10 s\) key_/);
    expect(rotated).not.toContain("no longer works");

    const revoked = await done(["keys", "revoke", made.id]);
    expect(revoked).toMatch(new RegExp(`^revoked ${made.id} \\(sk-kvg-\\w+\\) at \\S+: the gateway refuses it with 401 within 10 s\\n?$`));
  }, 60_000);
});

describe("what npx kvgate keys prints of a key", () => {
  it("writes out the control characters of its name, labels and models, in create's and show's text as in list's table: a key's values cannot rewrite the operator's terminal", async () => {
    const args = ["keys", "create", "--name", "web\u001b[2J", "--team", "a\u001b]0;pwned\u0007", "--models", "m\u009b31m"];
    const created = await done(args);
    const id = /^created key (key_\w+);/m.exec(created)?.[1] ?? "";
    const shown = await done(["keys", "show", id]);
    for (const out of [created, shown, await done(["keys", "list"])]) {
      // Line feeds end its lines; no other control character reaches the terminal.
      expect(out).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
      expect(out).toContain("web\\u001b[2J");
    }
    expect(shown).toContain("team=a\\u001b]0;pwned\\u0007");
    expect(shown).toContain("m\\u009b31m");
  }, 30_000);

  it("list reads every page of keys: the API answers at most 100 a call", async () => {
    const views: KeyView[] = [];
    for (let i = 0; i < 230; i++) {
      const res = await fetch(`${gateway.url}/admin/v1/keys`, { method: "POST", headers: { authorization: `Bearer ${gateway.keys.admin}`, "content-type": "application/json" }, body: JSON.stringify({ name: `paged-${i}` }) });
      expect(res.status).toBe(201);
      views.push((await res.json()) as KeyView);
    }
    // The list's order: oldest first, keys made in the same millisecond by id.
    const made = views.sort((a, b) => (a.created_at === b.created_at ? (a.id < b.id ? -1 : 1) : a.created_at < b.created_at ? -1 : 1)).map((k) => k.id);
    const list = await json<KeyList>(["keys", "list"]);
    const ids = list.data.map((k) => k.id);
    expect(ids.slice(-made.length)).toEqual(made);
    expect(new Set(ids).size).toBe(ids.length);
    expect(list).toMatchObject({ object: "list", first_id: ids[0], last_id: made.at(-1), has_more: false });
    const table = (await done(["keys", "list"])).split("\n").filter((line) => line.startsWith("key_"));
    expect(table.length).toBe(ids.length);
  }, 60_000);
});

describe("the key list by status", () => {
  it("GET /admin/v1/keys?status= and keys list --status show only keys of that status, page after page, where most keys are revoked", async () => {
    const adminCall = (method: string, path: string, body?: unknown) =>
      fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${gateway.keys.admin}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    // 5 live keys among 240 revoked (more than two pages of 100), and one expired.
    const active: string[] = [];
    for (let i = 0; i < 245; i++) {
      const res = await adminCall("POST", "/admin/v1/keys", { name: `status-${i}` });
      expect(res.status).toBe(201);
      const id = ((await res.json()) as KeyView).id;
      if (i % 49 === 0) active.push(id);
      else expect((await adminCall("POST", `/admin/v1/keys/${id}/revoke`)).status).toBe(200);
    }
    // A margin a loaded machine's create survives: an expiry already past when it lands is refused.
    const expiringRes = await adminCall("POST", "/admin/v1/keys", { name: "status-expired", expires_at: new Date(Date.now() + 3000).toISOString() });
    expect(expiringRes.status).toBe(201);
    const expiring = ((await expiringRes.json()) as KeyView).id;
    await vi.waitFor(async () => expect(((await (await adminCall("GET", `/admin/v1/keys/${expiring}`)).json()) as KeyView).status).toBe("expired"), { timeout: 10_000, interval: 50 });

    // Through the API: a page of active keys holds active keys only, up to its limit, and goes on from its last.
    const seen: string[] = [];
    for (let after = ""; ; ) {
      const res = await adminCall("GET", `/admin/v1/keys?status=active&limit=2${after ? `&after=${after}` : ""}`);
      expect(res.status).toBe(200);
      const page = (await res.json()) as KeyList;
      expect(page.data.length).toBeLessThanOrEqual(2);
      expect(page.data.every((k) => k.status === "active")).toBe(true);
      seen.push(...page.data.map((k) => k.id));
      if (!page.has_more) break;
      after = page.last_id as string;
    }
    expect(seen.filter((id) => active.includes(id))).toEqual(active);
    const expired = (await (await adminCall("GET", "/admin/v1/keys?status=expired")).json()) as KeyList;
    expect(expired.data.map((k) => k.id)).toContain(expiring);
    expect(expired.data.every((k) => k.status === "expired")).toBe(true);
    const revoked = (await (await adminCall("GET", "/admin/v1/keys?status=revoked&limit=100")).json()) as KeyList;
    expect(revoked).toMatchObject({ has_more: true });
    expect(revoked.data.length).toBe(100);
    expect(revoked.data.every((k) => k.status === "revoked")).toBe(true);

    const bad = await adminCall("GET", "/admin/v1/keys?status=live");
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ error: { message: 'status must be one of active, revoked, expired, not "live"', type: "invalid_request_error", param: "status", code: "invalid_value" } });

    // Through the CLI: every page, the active keys only.
    const listed = await json<KeyList>(["keys", "list", "--status", "active"]);
    expect(listed.data.every((k) => k.status === "active")).toBe(true);
    expect(listed.data.filter((k) => active.includes(k.id)).map((k) => k.id)).toEqual(active);
    const table = (await done(["keys", "list", "--status", "revoked"])).split("\n").filter((line) => line.startsWith("key_"));
    expect(table.length).toBeGreaterThanOrEqual(240);
    expect(table.every((line) => /\srevoked\s/.test(line))).toBe(true);
  }, 90_000);
});

describe("npx kvgate usage", () => {
  it("--json prints the four totals, zero for a new key, and the days asked for", async () => {
    const made = await json<IssuedKeyView>(["keys", "create"]);
    const u = await json<UsageView>(["usage", "--key", made.id]);
    expect(u).toMatchObject({ object: "usage", key: made.id, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, requests: 0, cost_usd: 0, by: [], until: dayOf(Date.now()) });
    const week = await json<UsageView>(["usage", "--key", made.id, "--since", "7d"]);
    expect(week.since).toBe(dayOf(Date.now() - 7 * 86_400_000));
    const plain = await done(["usage", "--key", made.id, "--since", "2026-01-01", "--until", "2026-01-31"]);
    expect(plain).toBe(`usage of ${made.id}, 2026-01-01 to 2026-01-31 (UTC days): 0 prompt tokens (0 cached), 0 completion tokens, 0 requests, $0\n`);
  }, 30_000);
});

describe("a key made with the CLI, used through npm start", () => {
  it("serves chat, refuses its rpm with a 429, shows its usage in npx kvgate usage, and stops at revoke", async () => {
    const made = await json<IssuedKeyView>(["keys", "create", "--rpm", "2", "--models", "kvgate-sim", "--json"]);
    const client = new OpenAI({ apiKey: made.key, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
    const messages = [{ role: "user" as const, content: "Hello from a virtual key" }];
    let streamed = "";
    for await (const chunk of await client.chat.completions.create({ model: "kvgate-sim", messages, max_tokens: 6, stream: true })) streamed += chunk.choices[0]?.delta.content ?? "";
    expect(streamed.length).toBeGreaterThan(0);
    const whole = await client.chat.completions.create({ model: "kvgate-sim", messages, max_tokens: 6 });
    const over = await client.chat.completions.create({ model: "kvgate-sim", messages, max_tokens: 6 }).catch((e: unknown) => e);
    expect(over).toBeInstanceOf(OpenAI.RateLimitError);
    expect((over as InstanceType<typeof OpenAI.RateLimitError>).code).toBe("rate_limit_exceeded");

    await vi.waitFor(async () => expect((await json<UsageView>(["usage", "--key", made.id])).requests).toBe(2), { timeout: 15_000, interval: 500 });
    const u = await json<UsageView>(["usage", "--key", made.id]);
    // The non-streamed answer's usage as the client saw it is part of the total; the stream's is the rest.
    expect(u.prompt_tokens).toBeGreaterThan(whole.usage?.prompt_tokens ?? Infinity);
    expect(u.completion_tokens).toBe(12);

    await done(["keys", "revoke", made.id]);
    await vi.waitFor(async () => {
      const after = await client.chat.completions.create({ model: "kvgate-sim", messages, max_tokens: 1 }).catch((e: unknown) => e);
      expect(after).toBeInstanceOf(OpenAI.AuthenticationError);
    }, { timeout: 12_000, interval: 500 });
  }, 90_000);
});

describe("npx kvgate keys' failures", () => {
  it("a wrong command line exits 2 with a message and the usage, and asks the gateway nothing", async () => {
    const cases: [string[], RegExp][] = [
      [["keys", "create", "--rpm", "abc"], /^kvgate: --rpm must be a positive integer, not "abc"$/],
      [["keys", "create", "--budget-usd", "0"], /^kvgate: --budget-usd must be a positive number/],
      [["keys", "create", "--period", "week"], /^kvgate: --period must be one of day, month, total/],
      [["keys", "list", "--status", "live"], /^kvgate: --status must be one of active, revoked, expired, not "live"$/],
      [["keys", "create", "--expires", "soon"], /^kvgate: --expires must be an ISO timestamp/],
      // Past the dates there are (and, shorter, past the year 9999, which no ISO timestamp the API takes names).
      [["keys", "create", "--expires", "1000000000d"], /^kvgate: --expires must be a duration that ends within the years 0000 to 9999, not "1000000000d"$/],
      [["keys", "create", "--expires", "3000000d"], /^kvgate: --expires must be a duration that ends within the years 0000 to 9999/],
      [["usage", "--key", "key_x", "--since", "1000000000d"], /^kvgate: --since must be a duration that ends within the years 0000 to 9999/],
      [["keys", "create", "--bogus"], /^kvgate: Unknown option '--bogus'/],
      [["keys", "revoke"], /^kvgate: keys revoke needs ID$/],
      [["keys", "show", "a", "b"], /^kvgate: keys show takes ID only, not "a b"$/],
      [["keys", "update", "key_x"], /^kvgate: keys update needs at least one flag to change$/],
      [["usage"], /^kvgate: --key is required/],
      [["usage", "--key", "key_x", "--since", "last week"], /^kvgate: --since must be/],
      [["keys"], /^kvgate: unknown command "keys"$/],
    ];
    // KVGATE_URL names a port nothing listens on: a command that asked the gateway would say it cannot reach it (exit 1).
    const nowhere = `http://127.0.0.1:${await freePort("127.0.0.1")}`;
    // One at a time: a dozen npx at once on a two-core machine take longer than a command may.
    for (const [args, message] of cases) {
      const r = await runKvgate(args, { KVGATE_URL: nowhere, KVGATE_ADMIN_KEY: gateway.keys.admin });
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: "" });
      expect(r.stderr[0], args.join(" ")).toMatch(message);
      expect(r.stderr.join("\n")).toContain("usage: npx kvgate <command>");
    }
  }, 90_000);

  it("a flag the command does not take is a wrong command line (exit 2) naming it: keys create --model (deployments' and usage's flag) made a key for every model", async () => {
    const before = (await json<KeyList>(["keys", "list"])).data.length;
    const r = await kvgate(["keys", "create", "--model", "kvgate-sim", "--json"]);
    expect({ code: r.code, stdout: r.stdout, first: r.stderr[0] }).toEqual({ code: 2, stdout: "", first: "kvgate: keys create does not take --model (did you mean --models?)" });
    expect(r.stderr.join("\n")).toContain("usage: npx kvgate <command>");
    expect((await json<KeyList>(["keys", "list"])).data.length).toBe(before);
    const cases: [string[], string][] = [
      [["keys", "create", "--group", "g"], "kvgate: keys create does not take --group"],
      [["deployments", "add", "--group", "g", "--id", "gpu-9", "--url", "http://10.0.0.9:8000", "--model", "m", "--max-parallel", "8"], "kvgate: deployments add does not take --max-parallel"],
      [["usage", "--key", "key_x", "--models", "m"], "kvgate: usage does not take --models (did you mean --model?)"],
      [["keys", "show", "key_x", "--rpm", "5"], "kvgate: keys show does not take --rpm"],
      [["status", "--group", "g"], "kvgate: status does not take --group"],
    ];
    // Nothing listens at KVGATE_URL: a command that went on to ask the gateway would exit 1.
    const nowhere = `http://127.0.0.1:${await freePort("127.0.0.1")}`;
    for (const [args, message] of cases) {
      const wrong = await runKvgate(args, { KVGATE_URL: nowhere, KVGATE_ADMIN_KEY: gateway.keys.admin });
      expect({ args, code: wrong.code, stdout: wrong.stdout, first: wrong.stderr[0] }).toEqual({ args, code: 2, stdout: "", first: message });
    }
  }, 90_000);

  it("the gateway's refusals exit 1 with its message naming the field; the clients' key administers nothing", async () => {
    const badOrigin = await kvgate(["keys", "create", "--origins", "https://app.example/path"]);
    expect(badOrigin.code).toBe(1);
    expect(badOrigin.stderr).toEqual([expect.stringMatching(/^kvgate: POST \/admin\/v1\/keys: 400 origins\[0\] must be an exact origin/)]);
    const unknown = await kvgate(["keys", "show", "key_nope"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toEqual(['kvgate: GET /admin/v1/keys/key_nope: 404 no key "key_nope"']);
    const master = await kvgate(["keys", "list"], gateway.keys.api);
    expect(master.code).toBe(1);
    expect(master.stderr).toEqual([expect.stringMatching(/^kvgate: GET \/admin\/v1\/keys: 401 /)]);
  }, 30_000);
});
