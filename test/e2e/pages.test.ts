import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Locator, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { unstable_readConfig } from "wrangler";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { startChatLoad } from "../../bench/harness/chat-load.ts";
import { CHROMIUM, hasChromium } from "../../bench/harness/chromium.ts";
import type { DeploymentRow } from "../../src/fleet/admin-api.ts";
import type { IssuedKeyView, KeyView, UsageView } from "../../src/tenants/admin-api.ts";
import { ROOT } from "../support/run-script.ts";
import { browserPages, type BrowserPages } from "./browser-pages.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Issue 13's pages as a person meets them: the bundled gateway and its static assets in workerd
 * (Cloudflare's asset routing in front, as deployed), the simulated fleet as the GPUs, and Debian's
 * Chromium, headless, driven by playwright-core. Everything the pages show is read off the page;
 * what they change is checked through the admin API.
 */

const GROUP = "pages";
const BACKENDS = ["sim-0", "sim-1", "sim-2"];
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const missing = !hasChromium();
if (missing) console.warn(`test/e2e/pages.test.ts: skipped, ${CHROMIUM} is missing (apt-get install -y --no-install-recommends chromium; .ci/run installs it)`);

let fleet: Fleet;
let gw: TestGateway;
let pages: BrowserPages;

beforeAll(async () => {
  if (missing) return;
  // Streams that take a while to come (25 ms a token), and a first token after 30 ms: in flight and TTFT to see.
  fleet = await startFleet({ workers: 3, basePort: 0, preset: "instant", decodeStepMs: 25, prefillBaseMs: 30, servedModelName: "sim-7b" });
  const deployments = BACKENDS.map((id, i) => ({ id, baseUrl: fleet.urls[i] as string, model: "sim-7b" }));
  gw = await startTestGateway({ modelGroups: [{ name: GROUP, strategy: "prefix-aware", deployments }] }, { KVGATE_ADMIN_KEY: adminKey }, { assets: true });
  pages = await browserPages(gw.url);
}, 60_000);
afterEach(async () => {
  await pages?.closePages();
});
afterAll(async () => {
  await pages?.close();
  await gw?.close();
  await fleet?.close();
});

const open = (path: string) => pages.open(path);

async function admin<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  expect(res.ok, `${method} ${path}: ${res.status}`).toBe(true);
  return (await res.json()) as T;
}

const deployment = (id: string) => admin<DeploymentRow>("GET", `/groups/${GROUP}/deployments/${id}`);

/** Opens the dashboard with the admin key, typed and sent as a person does (Enter in the field). */
const dashboard = () => pages.dashboard(adminKey, `[data-group="${GROUP}"] tr[data-deployment="sim-2"]`);

const cell = (page: Page, id: string, field: string): Locator => page.locator(`[data-group="${GROUP}"] tr[data-deployment="${id}"] [data-field="${field}"]`);
/** The number a cell starts with ("3 / 64" → 3, "41 ms" → 41); NaN for "–". */
const leading = async (l: Locator): Promise<number> => Number.parseFloat((await l.textContent()) ?? "");

const playground = (key: string) => pages.playground(key);

interface Sent {
  /** The reply's text each time it was seen to change, while it streamed. */
  seen: string[];
  route: Record<"backend" | "reason" | "prefix" | "overhead", string>;
}

/** Clicks `button` and watches the last reply until its stream ends. */
async function sendAndWatch(page: Page, button: string, n: number): Promise<Sent> {
  await page.getByRole("button", { name: button, exact: true }).click();
  const reply = page.locator("#conversation li.assistant").last();
  const text = reply.locator(".reply-text");
  const seen: string[] = [];
  const deadline = Date.now() + 15_000;
  // The attribute is "true" before a send starts too: wait for this send's line first.
  await reply.locator(`[data-send="${n}"]`).waitFor();
  for (;;) {
    const done = (await reply.getAttribute("data-done")) === "true";
    const now = (await text.textContent()) ?? "";
    if (now !== (seen.at(-1) ?? "")) seen.push(now);
    if (done || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  const line = reply.locator(`[data-send="${n}"]`);
  // A field the answer's headers did not give is not shown.
  const field = async (f: string) => {
    const shown = line.locator(`[data-field="${f}"]`);
    return (await shown.count()) === 0 ? "" : ((await shown.textContent()) ?? "");
  };
  return { seen, route: { backend: await field("backend"), reason: await field("reason"), prefix: await field("prefix"), overhead: await field("overhead") } };
}

describe.skipIf(missing)("the pages, served as Workers static assets", () => {
  it("GET / leads to both pages; the API paths still reach the Worker; production serves the same assets", async () => {
    const home = await fetch(`${gw.url}/`);
    expect(home.status).toBe(200);
    const html = await home.text();
    expect(html).toContain('href="/dashboard/"');
    expect(html).toContain('href="/playground/"');
    // No script or style from anywhere else, and no framing of the pages that hold the admin key.
    expect(home.headers.get("content-security-policy")).toContain("default-src 'self'");
    expect(home.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
    for (const path of ["/dashboard", "/playground"]) {
      const res = await fetch(`${gw.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.url).toBe(`${gw.url}${path}/`);
      expect(await res.text()).toContain(`<script type="module" src="${path}${path}.js">`);
    }
    const models = await fetch(`${gw.url}/v1/models`);
    expect(models.status).toBe(401);
    expect(((await models.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
    expect((await fetch(`${gw.url}/health`)).status).toBe(200);
    const unknown = await fetch(`${gw.url}/no-such-page`);
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe("unknown_url");
    const read = (env?: string) => unstable_readConfig({ config: join(ROOT, "wrangler.toml"), ...(env ? { env } : {}) }, { hideWarnings: true }).assets;
    expect(read("production")).toEqual(read());
  });

  it("the dashboard shows nothing without the admin key, and a wrong key gets the gateway's refusal", async () => {
    const page = await open("/dashboard");
    await expect.poll(() => page.locator("#live").isHidden()).toBe(true);
    expect(await page.locator("[data-group]").count()).toBe(0);
    await page.getByLabel("Admin key").fill("sk-not-the-admin-key");
    await page.getByRole("button", { name: "Open" }).click();
    await expect.poll(() => page.getByRole("status").textContent()).toContain("invalid API key");
    expect(await page.locator("[data-group]").count()).toBe(0);
    expect(await page.evaluate(() => sessionStorage.getItem("kvgate.adminKey"))).toBeNull();
  });

  it("the dashboard's in-flight and TTFT values change under load, and the routing decisions show", async () => {
    const page = await dashboard();
    // Nothing yet: "–" before the routing object has seen a backend, 0 after.
    for (const id of BACKENDS) expect(await cell(page, id, "inFlight").textContent()).toMatch(/^(–|0) \/ /);
    // A virtual key reads its usage, so its streams are timed on main's relay too.
    const key = await admin<IssuedKeyView>("POST", "/keys", { name: "dashboard-load" });
    const load = startChatLoad({ url: gw.url, key: key.key, model: GROUP, concurrency: 6, maxTokens: 40 });
    try {
      const most = async (field: string) => Math.max(...(await Promise.all(BACKENDS.map((id) => leading(cell(page, id, field))))).filter((n) => !Number.isNaN(n)), 0);
      await vi.waitFor(async () => expect(await most("inFlight")).toBeGreaterThan(0), EVENTUALLY);
      // The simulated GPUs take 30 ms to the first token.
      await vi.waitFor(async () => expect(await most("ttft")).toBeGreaterThanOrEqual(30), EVENTUALLY);
      await vi.waitFor(async () => expect(await most("prefixBlocks")).toBeGreaterThan(0), EVENTUALLY);
      // The load's conversations share system prompts: the backends' caches serve part of each prompt.
      await vi.waitFor(async () => expect(await most("cached")).toBeGreaterThan(0), EVENTUALLY);
    } finally {
      expect((await load.stop()).failed).toBe(0);
    }
    // And back: the view follows the fleet both ways.
    await vi.waitFor(async () => {
      for (const id of BACKENDS) expect(await leading(cell(page, id, "inFlight"))).toBe(0);
    }, EVENTUALLY);
    const box = page.locator(`[data-group="${GROUP}"] .decisions`);
    await vi.waitFor(async () => expect(await box.locator("tr[data-reason]").count()).toBeGreaterThan(0), EVENTUALLY);
    const reason = (await box.locator("tr[data-reason] td").nth(2).textContent()) ?? "";
    expect(["prefix-hit", "hot-spread", "least-loaded", "saturated-spill", "load-balanced"]).toContain(reason);
  });

  it("drain and enable from the page (the keyboard's Enter on a real button) change the registry; a refresh keeps the focus", async () => {
    const page = await dashboard();
    const drain = page.getByRole("button", { name: "Drain sim-1" });
    await drain.focus();
    // Two refreshes later the same button still has the focus: rows are updated, not rebuilt. Each
    // refresh that ends writes the time it ended, even the same text: counted, not waited for.
    await page.evaluate(() => {
      const w = window as unknown as { refreshes: number };
      w.refreshes = 0;
      new MutationObserver(() => w.refreshes++).observe(document.getElementById("updated") as HTMLElement, { childList: true, characterData: true, subtree: true });
    });
    await expect.poll(() => page.evaluate(() => (window as unknown as { refreshes: number }).refreshes), EVENTUALLY).toBeGreaterThanOrEqual(2);
    expect(await page.evaluate(() => document.activeElement?.getAttribute("aria-label"))).toBe("Drain sim-1");
    await drain.press("Enter");
    await vi.waitFor(async () => expect((await deployment("sim-1")).state).toBe("draining"), EVENTUALLY);
    await expect.poll(() => cell(page, "sim-1", "state").textContent(), EVENTUALLY).toMatch(/^draining/);
    await page.getByRole("button", { name: "Enable sim-1" }).click();
    await vi.waitFor(async () => expect((await deployment("sim-1")).state).toBe("active"), EVENTUALLY);
    await expect.poll(() => cell(page, "sim-1", "state").textContent(), EVENTUALLY).toBe("active");
  });

  it("on a phone's width the page does not scroll sideways: a wide table scrolls in its own box, its buttons still reached", async () => {
    await admin<IssuedKeyView>("POST", "/keys", { name: "a phone's view", rpm: 600, tpm: 100000, max_parallel: 4, budget_usd: 25, models: [GROUP] });
    const page = await dashboard();
    await page.setViewportSize({ width: 375, height: 800 });
    await page.locator("#keys tbody tr[data-key]").first().waitFor();
    const width = () => page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
    const { scroll, client } = await width();
    expect(scroll).toBeLessThanOrEqual(client);
    // The keyboard reaches the last column's buttons: the table's box scrolls them into view.
    const drain = page.getByRole("button", { name: "Drain sim-2" });
    await drain.focus();
    const box = await drain.boundingBox();
    expect(box !== null && box.x >= 0 && box.x + box.width <= 375).toBe(true);
    expect((await width()).scroll).toBeLessThanOrEqual(client);
  });

  it("a key's budgets read with their period: a day's, a month's, and one for the key's whole life", async () => {
    const keys = await Promise.all(
      (["day", "month", "total"] as const).map((budget_period) => admin<IssuedKeyView>("POST", "/keys", { name: `budget ${budget_period}`, budget_tokens: 1000, budget_usd: 2.5, budget_period })),
    );
    const page = await dashboard();
    const limits = (k: IssuedKeyView) => page.locator(`#keys tr[data-key="${k.id}"] td`).nth(2).textContent();
    await page.locator(`#keys tr[data-key="${keys[2]?.id}"]`).waitFor();
    expect(await limits(keys[0] as IssuedKeyView)).toBe("1000 tokens a day · $2.5 a day");
    expect(await limits(keys[1] as IssuedKeyView)).toBe("1000 tokens a month · $2.5 a month");
    expect(await limits(keys[2] as IssuedKeyView)).toBe("1000 tokens in total · $2.5 in total");
  });

  it("keys and usage from the dashboard: the list, a key's usage, its revocation", async () => {
    const key = await admin<IssuedKeyView>("POST", "/keys", { name: "usage-view", rpm: 600 });
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: GROUP, max_tokens: 4, messages: [{ role: "user", content: "count me" }] }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    await vi.waitFor(async () => expect((await admin<UsageView>("GET", `/usage?key=${key.id}`)).requests).toBe(1), EVENTUALLY);

    const page = await dashboard();
    const row = page.locator(`#keys tr[data-key="${key.id}"]`);
    await row.waitFor();
    expect(await row.textContent()).toContain("600 rpm");
    expect(await page.content()).not.toContain(key.key);
    await page.getByRole("button", { name: `Usage of ${key.id}` }).click();
    await expect.poll(() => page.locator("#usage-totals").textContent()).toMatch(/^1 requests · [1-9]\d* prompt tokens/);
    expect(await page.locator("#usage-rows tbody tr").count()).toBe(1);

    page.once("dialog", (d) => void d.accept());
    await page.getByRole("button", { name: `Revoke ${key.id}` }).click();
    await expect.poll(() => row.locator('[data-field="status"]').textContent(), EVENTUALLY).toBe("revoked");
    expect((await admin<KeyView>("GET", `/keys/${key.id}`)).status).toBe("revoked");
    expect(await page.getByRole("button", { name: `Revoke ${key.id}` }).count()).toBe(0);
  });

  it("the dashboard lists the keys of one status when asked: the active ones alone where most are revoked", async () => {
    const made: IssuedKeyView[] = [];
    for (let i = 0; i < 6; i++) made.push(await admin<IssuedKeyView>("POST", "/keys", { name: `status-${i}` }));
    const revoked = made.slice(0, 4);
    const active = made.slice(4);
    for (const k of revoked) await admin<KeyView>("POST", `/keys/${k.id}/revoke`);

    const page = await dashboard();
    await page.locator(`#keys tr[data-key="${active[0]?.id}"]`).waitFor();
    const asked: URL[] = [];
    page.on("request", (r) => {
      const url = new URL(r.url());
      if (url.pathname === "/admin/v1/keys") asked.push(url);
    });
    const statuses = () => page.locator('#keys tbody [data-field="status"]').allTextContents();
    const shown = () => page.locator("#keys tbody tr[data-key]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key")));
    /** The table once `status` is chosen: asked of the API (at least one read, each of that status), not filtered in the page. */
    const choose = async (status: string) => {
      asked.length = 0;
      await page.getByLabel("Show keys").selectOption(status);
      await expect.poll(() => asked.length).toBeGreaterThan(0);
      expect(asked.every((u) => (u.searchParams.get("status") ?? "") === status)).toBe(true);
    };

    // The active ones unless the operator chooses: the revoked keys are never read.
    expect(await page.getByLabel("Show keys").inputValue()).toBe("active");
    expect([...new Set(await statuses())]).toEqual(["active"]);
    expect(await shown()).toEqual(expect.arrayContaining(active.map((k) => k.id)));
    expect(await shown()).not.toEqual(expect.arrayContaining([revoked[0]?.id]));

    await choose("revoked");
    await expect.poll(async () => [...new Set(await statuses())]).toEqual(["revoked"]);
    expect(await shown()).toEqual(expect.arrayContaining(revoked.map((k) => k.id)));
    // Refresh keeps the choice.
    asked.length = 0;
    await page.getByRole("button", { name: "Refresh keys" }).click();
    await expect.poll(() => asked.length).toBeGreaterThan(0);
    expect(asked.every((u) => u.searchParams.get("status") === "revoked")).toBe(true);

    await choose("active");
    await expect.poll(async () => [...new Set(await statuses())]).toEqual(["active"]);
    expect(await shown()).not.toEqual(expect.arrayContaining([revoked[0]?.id]));
    // Revoking from the active list says the key revoked where it stands; reading the list again takes it off.
    page.once("dialog", (d) => void d.accept());
    await page.getByRole("button", { name: `Revoke ${active[0]?.id}` }).click();
    await expect.poll(() => page.locator(`#keys tr[data-key="${active[0]?.id}"] [data-field="status"]`).textContent(), EVENTUALLY).toBe("revoked");
    await page.getByRole("button", { name: "Refresh keys" }).click();
    await expect.poll(shown, EVENTUALLY).not.toContain(active[0]?.id);
    expect(await shown()).toContain(active[1]?.id);

    await choose("");
    await expect.poll(shown).toEqual(expect.arrayContaining(made.map((k) => k.id)));
  });

  it("a key's usage on the dashboard reads its later pages over the first page's days, which a UTC midnight would otherwise move", async () => {
    const key = await admin<IssuedKeyView>("POST", "/keys", { name: "usage-pages" });
    // Requests at once go to different backends (least in flight): a row each, per day, model and backend.
    for (let round = 0; round < 5 && (await admin<UsageView>("GET", `/usage?key=${key.id}`)).by.length < 2; round++) {
      const sent = BACKENDS.map(() =>
        fetch(`${gw.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: GROUP, max_tokens: 4, messages: [{ role: "user", content: `row ${randomBytes(4).toString("hex")}` }] }),
        }).then((r) => r.arrayBuffer()),
      );
      await Promise.all(sent);
      await vi.waitFor(async () => expect((await admin<UsageView>("GET", `/usage?key=${key.id}`)).requests).toBe((round + 1) * BACKENDS.length), EVENTUALLY);
    }
    const rows = (await admin<UsageView>("GET", `/usage?key=${key.id}`)).by.length;
    expect(rows).toBeGreaterThanOrEqual(2);

    const page = await dashboard();
    // A page of one row, so the key's usage takes several: what the page asks for each is kept.
    const asked: URL[] = [];
    await page.route("**/admin/v1/usage?*", async (route) => {
      const url = new URL(route.request().url());
      asked.push(new URL(url));
      url.searchParams.set("limit", "1");
      await route.continue({ url: url.toString() });
    });
    await page.getByRole("button", { name: `Usage of ${key.id}` }).click();
    await expect.poll(() => page.locator("#usage-rows tbody tr").count()).toBe(rows);
    expect(asked.length).toBe(rows);
    const first = asked[0] as URL;
    expect(first.searchParams.has("after")).toBe(false);
    // The first answer's days, as the title shows them: every later page asks for those, not for the gateway's today again.
    const [, since, until] = /, (\d{4}-\d{2}-\d{2}) to (\d{4}-\d{2}-\d{2})$/.exec((await page.locator("#usage-title").textContent()) ?? "") ?? [];
    for (const later of asked.slice(1)) expect({ since: later.searchParams.get("since"), until: later.searchParams.get("until"), after: later.searchParams.has("after") }).toEqual({ since, until, after: true });
  });

  it("the playground streams a reply as it comes, shows how it was routed, and a second send of it comes back as prefix-hit", async () => {
    const page = await playground(gw.key);
    await page.getByLabel("Model").selectOption(GROUP);
    await page.getByLabel("System prompt").fill(`You answer in one paragraph. Session ${randomBytes(4).toString("hex")}.`);
    await page.getByLabel("Message").fill("Where does this request go, and why?");
    await page.getByLabel("Max tokens").fill("48");

    const first = await sendAndWatch(page, "Send", 1);
    // Rendered as it arrived: the text grew over several looks, each one what was there before and more.
    expect(first.seen.length, first.seen.join(" | ")).toBeGreaterThanOrEqual(4);
    for (let i = 1; i < first.seen.length; i++) expect((first.seen[i] as string).startsWith(first.seen[i - 1] as string)).toBe(true);
    expect((first.seen.at(-1) as string).split(" ").length).toBeGreaterThan(10);
    expect(BACKENDS).toContain(first.route.backend);
    expect(first.route.prefix).toMatch(/^0\/[1-9]\d*$/);
    expect(first.route.overhead).toMatch(/^\d+(\.\d+)?$/);

    const again = await sendAndWatch(page, "Send again", 2);
    expect(again.route.reason).toBe("prefix-hit");
    expect(again.route.backend).toBe(first.route.backend);
    const [matched, total] = again.route.prefix.split("/");
    expect(matched).toBe(total);
    // The first send's line stays: both are there to compare.
    expect(await page.locator("#conversation li.assistant [data-send]").count()).toBe(2);
  });

  it("the playground works with a virtual key: its models only, and what it spends counts as its usage", async () => {
    const key = await admin<IssuedKeyView>("POST", "/keys", { name: "playground", models: [GROUP] });
    const page = await playground(key.key);
    expect(await page.getByLabel("Model").locator("option").allTextContents()).toEqual([GROUP]);
    await page.getByLabel("Message").fill("Hello from a virtual key");
    const sent = await sendAndWatch(page, "Send", 1);
    expect(sent.seen.at(-1)).not.toBe("");
    // Where it went is the master key's to see: a virtual key is not told what other tenants' prompts left cached.
    expect(sent.route).toMatchObject({ backend: "", reason: "", prefix: "" });
    expect(sent.route.overhead).toMatch(/^\d+(\.\d+)?$/);
    expect(await page.locator('#conversation li.assistant [data-send="1"]').textContent()).toContain("the master key's to see");
    await vi.waitFor(async () => expect((await admin<UsageView>("GET", `/usage?key=${key.id}`)).requests).toBe(1), EVENTUALLY);
  });
  it("the playground works with a key limited to the gateway's own origin, whose GETs name no Origin", async () => {
    const key = await admin<IssuedKeyView>("POST", "/keys", { name: "own page", models: [GROUP], origins: [new URL(gw.url).origin] });
    const page = await playground(key.key);
    expect(await page.getByLabel("Model").locator("option").allTextContents()).toEqual([GROUP]);
    await page.getByLabel("Message").fill("Hello from the gateway's own page");
    const sent = await sendAndWatch(page, "Send", 1);
    expect(sent.seen.at(-1)).not.toBe("");
    // Another page's origin is still refused, and so is a caller that names none and is no browser page.
    const elsewhere = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key.key}`, origin: "https://elsewhere.example" } });
    expect(elsewhere.status).toBe(403);
    const server = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key.key}` } });
    expect(server.status).toBe(403);
  });

  it("the dashboard shows hostile group, deployment and key names as text, each group a region named by its heading", async () => {
    const group = `llama 3 "<img src=x onerror=window.owned=1>" \\`;
    const id = `<b id=owned>x</b> "d" \\`;
    await admin("POST", "/groups", { name: group, deployments: [{ id, baseUrl: fleet.urls[0], model: "sim-7b" }] });
    await admin("POST", "/keys", { name: "<script>window.owned=2</script>" });
    try {
      const page = await pages.dashboard(adminKey, `[data-group="${GROUP}"] tr[data-deployment="sim-2"]`);
      const section = page.getByRole("region", { name: `Group ${group}`, exact: true });
      await page.locator(`[data-group="${group.replace(/["\\]/g, "\\$&")}"] th`).first().waitFor({ timeout: 10_000 });
      await expect(section.count()).resolves.toBe(1);
      await expect(section.getByRole("rowheader", { name: id, exact: true }).count()).resolves.toBe(1);
      await page.locator("#keys").getByText("<script>window.owned=2</script>").waitFor({ timeout: 10_000 });
      expect(await page.evaluate(() => ({ owned: (window as unknown as { owned?: number }).owned, b: document.getElementById("owned") !== null }))).toEqual({ owned: undefined, b: false });
      // The other groups keep their names too.
      await expect(page.getByRole("region", { name: `Group ${GROUP}`, exact: true }).count()).resolves.toBe(1);
    } finally {
      await fetch(`${gw.url}/admin/v1/groups/${encodeURIComponent(group)}`, { method: "DELETE", headers: { authorization: `Bearer ${adminKey}` } });
    }
  }, 30_000);
});

describe.runIf(missing && process.env.CI)("CI", () => {
  it("has Chromium for the browser tests", () => {
    expect.fail(`${CHROMIUM} is missing: .ci/run installs Debian's chromium before the tests`);
  });
});
