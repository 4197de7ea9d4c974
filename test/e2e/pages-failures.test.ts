import { randomBytes } from "node:crypto";
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { APIResponse, Page, Route } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { hasChromium } from "../../bench/harness/chromium.ts";
import type { FleetStatus } from "../../src/fleet/admin-api.ts";
import type { KeyList } from "../../src/tenants/admin-api.ts";
import type { DecisionView } from "../../src/metrics/decisions.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { browserPages, type BrowserPages } from "./browser-pages.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * The pages when things go wrong or change under them: a request's outcome that comes after its
 * decision, an admin API that fails for a moment, a stream cut in half or failing while its
 * upstream goes on, a conversation cleared while it streams. The bundled gateway with its assets
 * in workerd, the simulated fleet and a hostile upstream as the GPUs, Debian's Chromium as the
 * browser (test/e2e/pages.test.ts says why it may be skipped).
 */

const GROUP = "pages";
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const missing = !hasChromium();

let fleet: Fleet;
let upstream: HostileUpstream;
let gw: TestGateway;
let pages: BrowserPages;
let engines: Server;

/**
 * Answers as engines do that the hostile upstream does not play: `/whole-json` a streamed request
 * with a whole chat completion as JSON (a server that ignores `stream`), `/endless-json` with one
 * whose text never ends, `/reasoning` a stream of a reasoning model's thinking (vLLM's
 * `reasoning_content`, then `reasoning`, its newer name) before its answer. Anything else (a
 * health probe) gets an empty JSON 200.
 */
function startEngines(): Promise<Server> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.url === "/whole-json/v1/chat/completions") {
        const message = { role: "assistant", content: "HELLO FROM JSON", reasoning_content: "weighed it whole" };
        const answer = { id: "chatcmpl-j", object: "chat.completion", created: 1, model: "json-7b", choices: [{ index: 0, message, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 } };
        return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
      }
      if (req.url === "/endless-json/v1/chat/completions") return endlessJson(res);
      if (req.url === "/reasoning/v1/chat/completions") {
        const chunk = (delta: Record<string, string>) => `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "reasoning-7b", choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
        res.writeHead(200, { "content-type": "text/event-stream" });
        return void res.end(chunk({ role: "assistant", reasoning_content: "thinking " }) + chunk({ reasoning: "hard" }) + chunk({ content: "the answer" }) + "data: [DONE]\n\n");
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

/** The engines' endless JSON answers: how many were asked for, and how many are still being written. */
const endlessJsonAnswers = { requests: 0, open: 0 };

/** A chat completion as JSON whose text never ends: 4 KiB writes as fast as the connection takes them, for as long as it lasts. */
function endlessJson(res: ServerResponse): void {
  endlessJsonAnswers.requests++;
  endlessJsonAnswers.open++;
  res.on("close", () => endlessJsonAnswers.open--);
  res.writeHead(200, { "content-type": "application/json" });
  res.write('{"id":"chatcmpl-e","object":"chat.completion","created":1,"model":"endless-json-7b","choices":[{"index":0,"message":{"role":"assistant","content":"');
  const text = "x".repeat(4096);
  const pump = (): void => {
    while (!res.destroyed) if (!res.write(text)) return void res.once("drain", pump);
  };
  pump();
}

beforeAll(async () => {
  if (missing) return;
  // 25 ms a token: a stream of 80 tokens takes two seconds, long enough to act on while it runs.
  fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant", decodeStepMs: 25, prefillBaseMs: 30, servedModelName: "sim-7b" });
  upstream = await startHostileUpstream();
  engines = await startEngines();
  const engineUrl = `http://127.0.0.1:${(engines.address() as AddressInfo).port}`;
  const engine = (name: string) => ({ name, failover: { maxAttempts: 1 }, deployments: [{ id: name, baseUrl: `${engineUrl}/${name}`, model: `${name}-7b` }] });
  const hostile = (name: string, behaviour: string) => ({ name, failover: { maxAttempts: 1 }, deployments: [{ id: behaviour.replace(":", "-"), baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b" }] });
  // A short leaseTtlMs: a test that holds the page's reads back leaves the group's object without a
  // call long enough for workerd to evict it, and an object restarted within 1.5 × leaseTtlMs of its
  // last lease says for up to leaseTtlMs that it cannot tell what is in flight.
  gw = await startTestGateway(
    { modelGroups: [{ name: GROUP, leaseTtlMs: 3_000, deployments: [{ id: "sim-0", baseUrl: fleet.urls[0] as string, model: "sim-7b" }] }, hostile("cut", "cut-mid-event"), hostile("erring", "error-then-endless"), hostile("tgi-erring", "error-then-endless:tgi"), hostile("long", "long-stream:20000"), hostile("unbroken", "big-event:64"), hostile("firehose", "firehose-stream"), hostile("endless", "endless-stream"), hostile("unended", "endless-event"), hostile("cr", "cr-stream:300"), hostile("split-crlf", "split-crlf:300"), engine("whole-json"), engine("endless-json"), engine("reasoning")] },
    { KVGATE_ADMIN_KEY: adminKey },
    { assets: true },
  );
  pages = await browserPages(gw.url);
}, 90_000);
afterEach(async () => {
  await pages?.closePages();
});
afterAll(async () => {
  await pages?.close();
  await gw?.close();
  await upstream?.close();
  engines?.close();
  await fleet?.close();
});

const dashboard = () => pages.dashboard(adminKey, `[data-group="${GROUP}"] tr[data-deployment="sim-0"]`);

async function playground(): Promise<Page> {
  const page = await pages.playground(gw.key);
  await page.getByLabel("System prompt").fill("");
  return page;
}

async function send(page: Page, model: string, message: string, maxTokens: number): Promise<void> {
  await page.getByLabel("Model").selectOption(model);
  await page.getByLabel("Message").fill(message);
  await page.getByLabel("Max tokens").fill(String(maxTokens));
  await page.getByRole("button", { name: "Send", exact: true }).click();
}

const lastReply = (page: Page) => page.locator("#conversation li.assistant").last();

/**
 * Holds the answers to the page's requests that `matches` picks: each request goes to the gateway
 * when the page sends it, and its answer reaches the page only when the test lets it go (as an
 * answer slow on its way back). `release` lets the first still held go and waits past the page's
 * reading of it, `releaseAll` each one held, `stop` lets those that come later through.
 */
/** The page's uncaught errors, as they come. */
function pageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  return errors;
}

/** A key check the page refused: its status the error `message`, the key not kept (`storageName`), its view (`view`) and Forget key hidden. */
async function expectKeyNotKept(page: Page, message: string, storageName: string, view: string): Promise<void> {
  const status = page.locator("#status");
  await vi.waitFor(async () => expect(await status.getAttribute("class"), (await status.textContent()) ?? "").toBe("error"), EVENTUALLY);
  expect(await status.textContent()).toBe(message);
  expect(await page.evaluate((n) => sessionStorage.getItem(n), storageName)).toBeNull();
  expect(await page.getByRole("button", { name: "Forget key" }).isHidden()).toBe(true);
  expect(await page.locator(view).isHidden()).toBe(true);
}

async function holdReads(page: Page, matches: (url: URL) => boolean) {
  const held: { route: Route; answer: Promise<APIResponse> }[] = [];
  await page.route(matches, (route) => void held.push({ route, answer: route.fetch() }));
  const release = async ({ route, answer }: (typeof held)[number]) => {
    const answered = page.waitForResponse((res) => res.request() === route.request());
    await route.fulfill({ response: await answer });
    await answered;
    // Past the answer's reading and drawing.
    await page.waitForTimeout(300);
  };
  return {
    arrived: () => vi.waitFor(() => expect(held.length).toBeGreaterThan(0), EVENTUALLY),
    async release() {
      const first = held.shift();
      if (!first) throw new Error("no request held");
      await release(first);
    },
    async releaseAll() {
      for (let h = held.shift(); h; h = held.shift()) await release(h);
    },
    stop: () => page.unroute(matches),
  };
}
const decisions = async (): Promise<DecisionView[]> => {
  const res = await fetch(`${gw.url}/admin/v1/groups/${GROUP}/decisions`, { headers: { authorization: `Bearer ${adminKey}` } });
  return ((await res.json()) as { data: DecisionView[] }).data;
};

describe.skipIf(missing)("the pages when things change or fail under them", () => {
  it("a key pasted with a character no HTTP header carries is said to be so, not that the gateway cannot be reached", async () => {
    // A key pasted from a chat or a document may carry a letter of another script or a typographic
    // dash; the browser refuses it as a header before any request goes out.
    for (const [path, label, button] of [["/playground", "API key", "Use key"], ["/dashboard", "Admin key", null]] as const) {
      const page = await pages.open(path);
      await page.getByLabel(label).fill(`${gw.key.slice(0, 6)}\u2014${gw.key.slice(6)}`);
      if (button) await page.getByRole("button", { name: button }).click();
      else await page.getByLabel(label).press("Enter");
      const status = page.locator("#status");
      await vi.waitFor(async () => expect(await status.textContent()).toMatch(/character/), EVENTUALLY);
      expect(await status.textContent()).not.toMatch(/reach the gateway/);
      expect(await page.evaluate(() => Object.keys(sessionStorage))).toEqual([]);
    }
  });

  it("a decision's outcome and TTFT show once they come, with no request after it", async () => {
    const page = await dashboard();
    const answer = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: GROUP, stream: true, max_tokens: 40, messages: [{ role: "user", content: `outcome ${randomBytes(4).toString("hex")}` }] }),
    }).then((r) => r.text());
    const row = page.locator(`[data-group="${GROUP}"] .decisions tbody tr`).first();
    await vi.waitFor(async () => expect(await row.locator("td").nth(4).textContent()).toBe("in flight"), EVENTUALLY);
    await answer;
    await vi.waitFor(async () => expect((await decisions())[0]?.outcome).toBe("ok"), EVENTUALLY);
    // The decision's line is filled in where it stands: the page shows it at its next refresh.
    await vi.waitFor(async () => expect(await row.locator("td").nth(4).textContent()).toBe("ok"), EVENTUALLY);
    expect(await row.locator("td").nth(5).textContent()).toMatch(/^\d+ ms$/);
  });

  it("a refresh that fails says so, and the next one that succeeds takes the error away", async () => {
    const page = await dashboard();
    const status = page.locator("#status");
    await page.route("**/admin/v1/**", (r) => r.abort("connectionrefused"));
    await vi.waitFor(async () => expect(await status.textContent()).toMatch(/^Refresh failed/), EVENTUALLY);
    expect(await status.getAttribute("class")).toContain("error");
    // Said once: the status line is a live region, and each rewrite is news to a screen reader.
    await page.evaluate(() => {
      const w = window as unknown as { rewrites: number };
      w.rewrites = 0;
      new MutationObserver((m) => (w.rewrites += m.length)).observe(document.getElementById("status") as HTMLElement, { childList: true, characterData: true, subtree: true });
    });
    await new Promise((r) => setTimeout(r, 2500));
    expect(await page.evaluate(() => (window as unknown as { rewrites: number }).rewrites)).toBe(0);
    await page.unroute("**/admin/v1/**");
    await vi.waitFor(async () => expect(await status.textContent()).not.toMatch(/Refresh failed/), EVENTUALLY);
    expect(await status.getAttribute("class")).not.toContain("error");
  });

  it("a refresh the gateway never answers says so, and the next answer takes the error away", async () => {
    const page = await dashboard();
    const status = page.locator("#status");
    // A connection that stays open with nothing coming back (a network gone under a laptop, a stuck hop).
    await page.route("**/admin/v1/status", () => {});
    await vi.waitFor(async () => expect(await status.textContent()).toMatch(/^Refresh failed: no answer from the gateway in 10 s/), { timeout: 15_000, interval: 100 });
    expect(await status.getAttribute("class")).toContain("error");
    await page.unroute("**/admin/v1/status");
    await vi.waitFor(async () => expect(await status.textContent()).not.toMatch(/Refresh failed/), EVENTUALLY);
  }, 30_000);

  it("a group whose in flight is unknown (a routing object that did not answer) says so, not 0 in flight", async () => {
    const page = await dashboard();
    const summary = page.locator(`[data-group="${GROUP}"] > p`);
    await vi.waitFor(async () => expect(await summary.textContent()).toMatch(/ · \d+ in flight$/), EVENTUALLY);
    // The gateway's answer while an object of the group (a shard's it gave up) does not answer: its routing revision known, what it holds not.
    await page.route("**/admin/v1/status", async (r) => {
      const status = (await (await r.fetch()).json()) as FleetStatus;
      for (const g of status.groups) {
        if (g.name !== GROUP) continue;
        g.inFlight = null;
        for (const row of g.deploymentRows) row.inFlight = null;
      }
      await r.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(status) });
    });
    await vi.waitFor(async () => expect(await summary.textContent()).toMatch(/ · in flight unknown$/), EVENTUALLY);
    expect(await page.locator(`[data-group="${GROUP}"] tr[data-deployment="sim-0"] [data-field="inFlight"]`).textContent()).toMatch(/^– \/ /);
    await page.unroute("**/admin/v1/status");
    await vi.waitFor(async () => expect(await summary.textContent()).toMatch(/ · \d+ in flight$/), EVENTUALLY);
  });

  it("a kept key outlives a failure that is no refusal, and a refusal still forgets it", async () => {
    const page = await dashboard();
    const kept = () => page.evaluate(() => sessionStorage.getItem("kvgate.adminKey"));
    // Kept once the page's first load with it answered, which may come after the page is open.
    // The key check is a read of the registry's groups (GET /admin/v1/groups): that read fails here.
    await vi.waitFor(async () => expect(await kept()).toBe(adminKey), EVENTUALLY);
    await page.route("**/admin/v1/groups", (r) => r.fulfill({ status: 503, contentType: "application/json", body: JSON.stringify({ error: { message: "registry unavailable", type: "server_error" } }) }));
    await page.reload();
    await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toContain("503: registry unavailable"), EVENTUALLY);
    expect(await kept()).toBe(adminKey);
    expect(await page.locator("#status").textContent()).toContain("the key is kept");
    // Another key typed meanwhile fails the same way: it is not the one kept, and the page does not say it is.
    await page.getByLabel("Admin key").fill(`sk-admin-${randomBytes(16).toString("hex")}`);
    await page.getByLabel("Admin key").press("Enter");
    await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toBe("503: registry unavailable"), EVENTUALLY);
    expect(await kept()).toBe(adminKey);
    // The gateway back: the kept key serves again, with nothing typed.
    await page.unroute("**/admin/v1/groups");
    await page.reload();
    await page.locator(`[data-group="${GROUP}"] tr[data-deployment="sim-0"]`).waitFor();
    // A refusal is the key's fault: it goes.
    await page.route("**/admin/v1/groups", (r) => r.fulfill({ status: 401, contentType: "application/json", body: JSON.stringify({ error: { message: "invalid admin key", type: "invalid_request_error" } }) }));
    await page.reload();
    await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toContain("401: invalid admin key"), EVENTUALLY);
    expect(await kept()).toBeNull();
  });

  it("a key check does not wait on every group's routing objects: a first read of them that takes past 10 s leaves the key accepted", async () => {
    // A fresh gateway's first GET /admin/v1/status wakes every group's routing object: at a thousand
    // groups, seconds (6 to 10 and more seen), compressed here into one slow answer past the 10 s.
    const page = await pages.open("/dashboard");
    let slow = true;
    await page.route("**/admin/v1/status", async (r) => {
      if (slow) {
        slow = false;
        await new Promise((w) => setTimeout(w, 10_500));
      }
      await r.continue().catch(() => {});
    });
    await page.getByLabel("Admin key").fill(adminKey);
    await page.getByLabel("Admin key").press("Enter");
    await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toBe("Admin key accepted."), EVENTUALLY);
    // The first refresh may say it heard nothing; the next shows the fleet, with the key kept.
    await page.locator(`[data-group="${GROUP}"] tr[data-deployment="sim-0"]`).waitFor({ timeout: 25_000 });
    await vi.waitFor(async () => expect(await page.locator("#status").textContent()).not.toMatch(/Refresh failed/), { timeout: 25_000, interval: 100 });
    expect(await page.evaluate(() => sessionStorage.getItem("kvgate.adminKey"))).toBe(adminKey);
  }, 60_000);

  it("a refresh whose reads wait their turn is slow, not failed: the bound is on silence, not on a whole refresh", async () => {
    const page = await dashboard();
    const status = page.locator("#status");
    // The gateway answering one read at a time, each in 6 s: a busy gateway, or a screen's
    // decisions reads behind the browser's six connections, compressed. A refresh is its /status
    // read and one a group in view (this group at least): every read answers within the 10 s, the
    // refresh's last only after 12 s or more.
    let queue = Promise.resolve();
    let slow = true;
    let started = 0;
    await page.route("**/admin/v1/**", (r) => {
      // A refresh begins with its /status read, once the one before it is over.
      if (started === 0 && r.request().url().endsWith("/admin/v1/status")) started = Date.now();
      queue = queue.then(async () => {
        if (slow) await new Promise((w) => setTimeout(w, 6000));
        await r.continue().catch(() => {});
      });
    });
    await vi.waitFor(() => expect(started).toBeGreaterThan(0), { timeout: 15_000, interval: 20 });
    const before = await page.locator("#updated").textContent();
    await vi.waitFor(async () => expect(await page.locator("#updated").textContent()).not.toBe(before), { timeout: 50_000, interval: 100 });
    expect(Date.now() - started).toBeGreaterThan(10_000);
    expect(await status.textContent()).not.toMatch(/Refresh failed/);
    // The reads still held go on at once: none is left waiting behind the next test.
    slow = false;
    await page.unroute("**/admin/v1/**");
    await queue;
  }, 70_000);

  it("a fleet of a thousand groups shows whole", async () => {
    const groups = Array.from({ length: 1000 }, (_, i) => ({ name: `many-${i}`, deployments: [{ id: `d-${i}`, baseUrl: fleet.urls[0] as string, model: "sim-7b" }] }));
    const big = await startTestGateway({ modelGroups: groups }, { KVGATE_ADMIN_KEY: adminKey }, { assets: true });
    const bigPages = await browserPages(big.url);
    try {
      const page = await bigPages.open("/dashboard");
      await page.getByLabel("Admin key").fill(adminKey);
      await page.getByLabel("Admin key").press("Enter");
      // A thousand groups' backends in the refresh's one /status read, the decisions of those in view beside it.
      await page.locator('[data-group="many-999"] tr[data-deployment="d-999"]').waitFor({ timeout: 100_000 });
      expect(await page.locator("#status").textContent()).not.toMatch(/Refresh failed/);
      expect(await page.locator("section[data-group]").count()).toBe(1000);
    } finally {
      await bigPages.close();
      await big.close();
    }
  }, 180_000);

  it("a refresh of a fleet of many groups costs a few admin calls, not two a group: every group's backends show, and the decisions of the groups in view", async () => {
    const n = 150;
    const groups = Array.from({ length: n }, (_, i) => ({ name: `fleet-${i}`, deployments: [{ id: `f-${i}`, baseUrl: fleet.urls[0] as string, model: "sim-7b" }] }));
    const big = await startTestGateway({ modelGroups: groups }, { KVGATE_ADMIN_KEY: adminKey }, { assets: true });
    const bigPages = await browserPages(big.url);
    try {
      const page = await bigPages.open("/dashboard");
      const reads: { path: string; at: number }[] = [];
      page.on("request", (r) => {
        const path = new URL(r.url()).pathname;
        if (path.startsWith("/admin/v1/") && !path.startsWith("/admin/v1/keys")) reads.push({ path, at: Date.now() });
      });
      await page.getByLabel("Admin key").fill(adminKey);
      await page.getByLabel("Admin key").press("Enter");
      await page.locator(`[data-group="fleet-${n - 1}"] tr[data-deployment="f-${n - 1}"]`).waitFor({ timeout: 60_000 });
      // Each refresh starts with a /status read (the key's check is a read of /groups): the reads from one refresh's to the next are a refresh's.
      const starts = () => reads.flatMap((r, i) => (r.path === "/admin/v1/status" ? [i] : []));
      await vi.waitFor(() => expect(starts().length).toBeGreaterThanOrEqual(4), { timeout: 60_000, interval: 50 });
      const [, , second, third] = starts() as [number, number, number, number];
      const refresh = reads.slice(second, third);
      console.log(`${n} groups: a refresh made ${refresh.length} admin reads, and the next began ${(reads[third] as { at: number }).at - (reads[second] as { at: number }).at} ms after it`);
      const inView = await page.evaluate(() => Array.from(document.querySelectorAll("section[data-group]")).filter((s) => s.getBoundingClientRect().top < innerHeight && s.getBoundingClientRect().bottom > 0).length);
      expect(inView).toBeGreaterThan(0);
      expect(inView).toBeLessThan(10);
      expect(refresh.length).toBeLessThanOrEqual(1 + inView);
      expect(await page.locator("section[data-group]").count()).toBe(n);
      await page.locator('[data-group="fleet-0"] .decisions').getByText("No request routed yet.").waitFor({ timeout: 10_000 });
      // A group scrolled into view shows its decisions from the next refresh on.
      const res = await fetch(`${big.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${big.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: `fleet-${n - 1}`, max_tokens: 4, messages: [{ role: "user", content: "the last group" }] }),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const last = page.locator(`[data-group="fleet-${n - 1}"]`);
      await last.scrollIntoViewIfNeeded();
      await last.locator(".decisions tr[data-reason]").first().waitFor({ timeout: 10_000 });
      expect(await page.locator("#status").textContent()).not.toMatch(/Refresh failed/);
    } finally {
      await bigPages.close();
      await big.close();
    }
  }, 120_000);

  it("a wrong key typed over the key in use is refused alone: the key in use stays kept, and its numbers go on", async () => {
    const page = await dashboard();
    const kept = () => page.evaluate(() => sessionStorage.getItem("kvgate.adminKey"));
    const status = page.locator("#status");
    await vi.waitFor(async () => expect(await kept()).toBe(adminKey), EVENTUALLY);
    const goesOn = async () => {
      expect(await kept()).toBe(adminKey);
      expect(await page.locator("#live").isHidden()).toBe(false);
      expect(await page.getByRole("button", { name: "Forget key" }).isHidden()).toBe(false);
      const last = await page.locator("#updated").textContent();
      await vi.waitFor(async () => expect(await page.locator("#updated").textContent()).not.toBe(last), EVENTUALLY);
    };
    await page.getByLabel("Admin key").fill("sk-wrong");
    await page.getByLabel("Admin key").press("Enter");
    await vi.waitFor(async () => expect(await status.textContent()).toMatch(/^401: invalid API key/), EVENTUALLY);
    await goesOn();
    expect(await status.textContent()).toBe("401: invalid API key (the key in use is unchanged)");
    // A check of another key that fails with no refusal leaves the key in use the same way.
    await page.route("**/admin/v1/groups", (r) => r.fulfill({ status: 503, contentType: "application/json", body: JSON.stringify({ error: { message: "registry unavailable", type: "server_error" } }) }));
    await page.getByLabel("Admin key").fill(`sk-admin-${randomBytes(16).toString("hex")}`);
    await page.getByLabel("Admin key").press("Enter");
    await vi.waitFor(async () => expect(await status.textContent()).toMatch(/^503: registry unavailable/), EVENTUALLY);
    await goesOn();
    expect(await status.textContent()).toBe("503: registry unavailable (the key in use is unchanged)");
  });

  it("a key refused mid-session (the admin key rotated) is forgotten, and its numbers go with it", async () => {
    const page = await dashboard();
    const kept = () => page.evaluate(() => sessionStorage.getItem("kvgate.adminKey"));
    await vi.waitFor(async () => expect(await kept()).toBe(adminKey), EVENTUALLY);
    let asked = 0;
    await page.route("**/admin/v1/**", (r) => {
      asked++;
      return r.fulfill({ status: 401, contentType: "application/json", body: JSON.stringify({ error: { message: "invalid API key", type: "authentication_error" } }) });
    });
    await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toContain("401: invalid API key"), EVENTUALLY);
    await vi.waitFor(async () => expect(await kept()).toBeNull(), EVENTUALLY);
    expect(await page.locator("#live").isHidden()).toBe(true);
    expect(await page.locator("[data-group]").count()).toBe(0);
    expect(await page.getByRole("button", { name: "Forget key" }).isHidden()).toBe(true);
    // And it stops asking.
    const after = asked;
    await new Promise((r) => setTimeout(r, 2500));
    expect(asked).toBe(after);
  });

  it("Forget key while the key table or a key's usage is being read: what that read brings is not drawn on the page that has no key", async () => {
    const made = await fetch(`${gw.url}/admin/v1/keys`, { method: "POST", headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" }, body: JSON.stringify({ name: "forgotten-while-read" }) });
    expect(made.status).toBe(201);
    const { id } = (await made.json()) as { id: string };
    for (const [path, start] of [
      ["/admin/v1/keys?", (page: Page) => page.getByLabel("Show keys").selectOption("revoked")],
      ["/admin/v1/usage?", (page: Page) => page.getByRole("button", { name: `Usage of ${id}` }).click()],
    ] as const) {
      const page = await dashboard();
      await page.getByRole("button", { name: `Usage of ${id}` }).waitFor();
      // The read's answer held until Forget key is pressed.
      const read = await holdReads(page, (url) => `${url.pathname}?`.startsWith(path) && url.search !== "");
      await start(page);
      await read.arrived();
      await page.getByRole("button", { name: "Forget key" }).click();
      expect(await page.locator("#keys tbody tr").count(), path).toBe(0);
      await read.release();
      expect(await page.locator("#keys tbody tr").count(), path).toBe(0);
      // In the DOM, not only out of sight under the hidden view: a key opened next would show the usage box as it was left.
      expect(await page.locator("#usage").evaluate((e) => (e as HTMLElement).hidden), path).toBe(true);
      expect(await page.locator("#status").textContent(), path).not.toContain("failed");
      await read.stop();
    }
  });

  describe("a gateway of 250 keys", () => {
    // A gateway of its own: its keys would push the other tests' keys past this file's first page.
    let many: TestGateway;
    let manyPages: BrowserPages;
    /** The keys' ids, oldest first, as the list orders them: made one after another. */
    const ids: string[] = [];
    const asAdmin = (path: string, method = "GET", json?: unknown) =>
      fetch(`${many.url}${path}`, { method, headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" }, body: json === undefined ? null : JSON.stringify(json) });
    const revoke = async (id: string) => expect((await asAdmin(`/admin/v1/keys/${id}/revoke`, "POST")).status).toBe(200);
    /** Every key of `status` ("" all), read from the API page after page. */
    const listed = async (status: string) => {
      const found: string[] = [];
      for (let after = ""; ; ) {
        const q = new URLSearchParams();
        if (status) q.set("status", status);
        if (after) q.set("after", after);
        const page = (await (await asAdmin(`/admin/v1/keys?${q}`)).json()) as KeyList;
        found.push(...page.data.map((k) => k.id));
        if (!page.has_more || page.last_id === null) return found;
        after = page.last_id;
      }
    };
    const rowIds = (page: Page) => page.locator("#keys tbody tr[data-key]").evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-key")));
    const focused = (page: Page) => page.evaluate(() => document.activeElement?.getAttribute("aria-label") ?? document.activeElement?.tagName);
    const keyReads = (test: (q: URLSearchParams) => boolean) => (url: URL) => url.pathname === "/admin/v1/keys" && test(url.searchParams);

    beforeAll(async () => {
      if (missing) return;
      many = await startTestGateway({ modelGroups: [{ name: GROUP, deployments: [{ id: "sim-0", baseUrl: fleet.urls[0] as string, model: "sim-7b" }] }] }, { KVGATE_ADMIN_KEY: adminKey }, { assets: true });
      manyPages = await browserPages(many.url);
      for (let i = 0; i < 250; i++) {
        const res = await asAdmin("/admin/v1/keys", "POST", { name: `many-${i}` });
        expect(res.status).toBe(201);
        ids.push(((await res.json()) as { id: string }).id);
      }
    }, 90_000);
    afterEach(async () => {
      await manyPages?.closePages();
    });
    afterAll(async () => {
      await manyPages?.close();
      await many?.close();
    });

    it("the dashboard reads a page of keys when it opens and the next when asked, and a revoke redraws its row alone: 250 keys are one read of 100, not every key", async () => {
      const page = await manyPages.open("/dashboard");
      const reads: URL[] = [];
      page.on("request", (r) => {
        const url = new URL(r.url());
        if (r.method() === "GET" && url.pathname === "/admin/v1/keys") reads.push(url);
      });
      await page.getByLabel("Admin key").fill(adminKey);
      await page.getByLabel("Admin key").press("Enter");
      const rows = page.locator("#keys tbody tr[data-key]");
      await rows.first().waitFor({ timeout: 30_000 });
      // The rows are drawn once their read answered: what was read to draw them is read by now.
      expect({ reads: reads.length, rows: await rows.count() }).toEqual({ reads: 1, rows: 100 });
      expect(reads[0]?.searchParams.get("status")).toBe("active");
      expect(await page.getByLabel("Show keys").inputValue()).toBe("active");
      const more = page.getByRole("button", { name: "More keys" });
      await more.click();
      await expect.poll(() => rows.count()).toBe(200);
      expect(reads.map((u) => u.searchParams.get("after"))).toEqual([null, ids[99]]);
      await more.click();
      await expect.poll(() => rows.count()).toBe(250);
      expect(await more.isHidden()).toBe(true);
      expect(reads.length).toBe(3);
      expect(await rowIds(page)).toEqual(ids);
      // A revoke redraws its row from the revoke's answer: no key is read again.
      page.once("dialog", (d) => void d.accept());
      await page.getByRole("button", { name: `Revoke ${ids[120]}` }).click();
      await expect.poll(() => page.locator(`#keys tr[data-key="${ids[120]}"] [data-field="status"]`).textContent(), EVENTUALLY).toBe("revoked");
      expect(await page.getByRole("button", { name: `Revoke ${ids[120]}` }).count()).toBe(0);
      expect(await rows.count()).toBe(250);
      expect(reads.length).toBe(3);
      // The keyboard stays in the row it acted on.
      expect(await focused(page)).toBe(`Usage of ${ids[120]}`);
    }, 120_000);

    it("More keys pages on the listing drawn, never one read before it: pressed while another choice is read, it adds nothing to the new table", async () => {
      // A few of the first 100 keys revoked: the first page of the active keys and the first of all differ.
      for (const id of ids.slice(10, 15)) await revoke(id);
      const active = await listed("active");
      const page = await manyPages.dashboard(adminKey, "#keys tbody tr[data-key]:first-child");
      expect(await rowIds(page)).toEqual(active.slice(0, 100));
      // "all" chosen, and More keys pressed before its answer (dispatched as a click that lands
      // as the choice is made: the button may be gone by then).
      const all = await holdReads(page, keyReads((q) => q.size === 0));
      const after = await holdReads(page, keyReads((q) => q.has("after")));
      await page.getByLabel("Show keys").selectOption("all");
      await all.arrived();
      await page.locator("#more-keys").dispatchEvent("click");
      // Past the read such a click would send.
      await page.waitForTimeout(300);
      await all.release();
      await after.releaseAll();
      await after.stop();
      await all.stop();
      expect(await rowIds(page), "all keys' first page").toEqual(ids.slice(0, 100));
    }, 60_000);

    it("a More read of the listing before, still out, does not stop the listing drawn from paging on, nor adds to it", async () => {
      const active = await listed("active");
      const page = await manyPages.dashboard(adminKey, "#keys tbody tr[data-key]:first-child");
      await page.getByLabel("Show keys").selectOption("all");
      await expect.poll(() => rowIds(page), EVENTUALLY).toEqual(ids.slice(0, 100));
      const stale = await holdReads(page, keyReads((q) => q.get("after") === ids[99] && !q.has("status")));
      await page.getByRole("button", { name: "More keys" }).click();
      await stale.arrived();
      await page.getByLabel("Show keys").selectOption("active");
      await expect.poll(() => rowIds(page), EVENTUALLY).toEqual(active.slice(0, 100));
      await page.getByRole("button", { name: "More keys" }).click();
      await expect.poll(() => rowIds(page), EVENTUALLY).toEqual(active.slice(0, 200));
      await stale.release();
      await stale.stop();
      expect(await rowIds(page), "after the stale More read").toEqual(active.slice(0, 200));
    }, 60_000);

    it("a choice whose read fails leaves no rows of the choice before under it, and no More keys for them", async () => {
      const page = await manyPages.dashboard(adminKey, "#keys tbody tr[data-key]:first-child");
      await page.route(keyReads((q) => q.get("status") === "revoked"), (r) => r.fulfill({ status: 503, contentType: "application/json", body: JSON.stringify({ error: { message: "keys unavailable", type: "server_error" } }) }));
      await page.getByLabel("Show keys").selectOption("revoked");
      await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toBe("Reading the keys failed: 503: keys unavailable"), EVENTUALLY);
      expect(await rowIds(page)).toEqual([]);
      expect(await page.getByRole("button", { name: "More keys" }).isHidden()).toBe(true);
    }, 60_000);

    it("a Revoke made while the key table is read again holds: a listing read before it, answered after, draws the key revoked", async () => {
      const page = await manyPages.dashboard(adminKey, "#keys tbody tr[data-key]:first-child");
      const target = (await rowIds(page))[20] as string;
      const reread = await holdReads(page, keyReads(() => true));
      await page.getByRole("button", { name: "Refresh keys" }).click();
      await reread.arrived();
      page.once("dialog", (d) => void d.accept());
      await page.getByRole("button", { name: `Revoke ${target}` }).click();
      const state = page.locator(`#keys tr[data-key="${target}"] [data-field="status"]`);
      await expect.poll(() => state.textContent(), EVENTUALLY).toBe("revoked");
      // The listing, read while the key was active, answers now.
      await reread.release();
      await reread.stop();
      expect(await state.textContent()).toBe("revoked");
      expect(await page.getByRole("button", { name: `Revoke ${target}` }).count()).toBe(0);
      // Read again, the active keys have it no more.
      await page.getByRole("button", { name: "Refresh keys" }).click();
      await expect.poll(() => page.locator(`#keys tr[data-key="${target}"]`).count(), EVENTUALLY).toBe(0);
    }, 60_000);

    it("More keys that brings no key (the active keys past the table revoked meanwhile) leaves the keyboard in the table, not on the page's body", async () => {
      const page = await manyPages.dashboard(adminKey, "#keys tbody tr[data-key]:first-child");
      const more = page.getByRole("button", { name: "More keys" });
      await more.click();
      await expect.poll(() => page.locator("#keys tbody tr[data-key]").count(), EVENTUALLY).toBe(200);
      const shown = await rowIds(page);
      // Another operator revokes every active key past the table: the page said there were more.
      const rest = (await listed("active")).filter((id) => !shown.includes(id));
      expect(rest.length).toBeGreaterThan(0);
      for (const id of rest) await revoke(id);
      await more.focus();
      await page.keyboard.press("Enter");
      await expect.poll(() => more.isHidden(), EVENTUALLY).toBe(true);
      expect(await rowIds(page)).toEqual(shown);
      expect(await focused(page)).toBe(`Usage of ${shown.at(-1)}`);
      expect(await page.locator("#status").textContent()).toBe("No more keys.");
    }, 60_000);
  });

  it("a key is kept once its check passes, not once the key table is read; a Forget key while it is checked or read holds", async () => {
    /** Holds the page's requests to `path` (its first, here) until released. */
    const hold = (page: Page, path: string) => holdReads(page, (url) => url.pathname === path);
    const forgotten = async (page: Page, storageName: string, view: string, what: string) => {
      expect(await page.evaluate((n) => sessionStorage.getItem(n), storageName), what).toBeNull();
      expect(await page.locator(view).isHidden(), what).toBe(true);
      expect(await page.getByRole("button", { name: "Forget key" }).isHidden(), what).toBe(true);
    };
    const kept = (page: Page) => page.evaluate(() => sessionStorage.getItem("kvgate.adminKey"));
    const typeAdminKey = async (page: Page) => {
      await page.getByLabel("Admin key").fill(adminKey);
      await page.getByLabel("Admin key").press("Enter");
    };
    // The key table's read held: the key is kept (a reload keeps it), and a Forget then is not undone when the read comes.
    {
      const page = await pages.open("/dashboard");
      const keysRead = await hold(page, "/admin/v1/keys");
      await typeAdminKey(page);
      await keysRead.arrived();
      await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toBe("Admin key accepted."), EVENTUALLY);
      expect(await kept(page)).toBe(adminKey);
      await page.getByRole("button", { name: "Forget key" }).click();
      await keysRead.release();
      await forgotten(page, "kvgate.adminKey", "#live", "the key table's read");
    }
    // The check itself held, a key already kept (Forget key shown): the key typed is not kept, nor its view shown, once the check answers after the Forget.
    {
      const page = await dashboard();
      await vi.waitFor(async () => expect(await kept(page)).toBe(adminKey), EVENTUALLY);
      const check = await hold(page, "/admin/v1/groups");
      await typeAdminKey(page);
      await check.arrived();
      await page.getByRole("button", { name: "Forget key" }).click();
      await check.release();
      await forgotten(page, "kvgate.adminKey", "#live", "the dashboard's key check");
    }
    // The playground's check (its model list) held the same way.
    {
      const page = await pages.playground(gw.key);
      await vi.waitFor(async () => expect(await page.evaluate(() => sessionStorage.getItem("kvgate.apiKey"))).toBe(gw.key), EVENTUALLY);
      const check = await hold(page, "/v1/models");
      await page.getByLabel("API key").fill(gw.key);
      await page.getByRole("button", { name: "Use key" }).click();
      await check.arrived();
      await page.getByRole("button", { name: "Forget key" }).click();
      await check.release();
      await forgotten(page, "kvgate.apiKey", "#chat", "the playground's key check");
    }
  });

  it("a hidden dashboard asks the gateway nothing, and refreshes at once when it shows again", async () => {
    const page = await dashboard();
    let asked = 0;
    page.on("request", (r) => {
      // One a refresh.
      if (r.url().endsWith("/admin/v1/status")) asked++;
    });
    // What the browser does when the tab goes to the background (headless Chromium keeps every page
    // visible, so the test says it as the browser would).
    const show = (hidden: boolean) =>
      page.evaluate((h) => {
        Object.defineProperty(document, "hidden", { configurable: true, get: () => h });
        Object.defineProperty(document, "visibilityState", { configurable: true, get: () => (h ? "hidden" : "visible") });
        document.dispatchEvent(new Event("visibilitychange"));
      }, hidden);
    await show(true);
    // A refresh already under way may end; nothing starts after it.
    await new Promise((r) => setTimeout(r, 1500));
    const before = asked;
    await new Promise((r) => setTimeout(r, 3000));
    expect(asked).toBe(before);
    const last = await page.locator("#updated").textContent();
    await show(false);
    await vi.waitFor(() => expect(asked).toBeGreaterThan(before), { timeout: 500, interval: 20 });
    await vi.waitFor(async () => expect(await page.locator("#updated").textContent()).not.toBe(last), EVENTUALLY);
    // And it goes on refreshing, once a second, not twice: no more than 4 in 3 s (two loops side by
    // side made about 6), and more come (a wait for them, not a count in the 3 s: a loaded
    // machine's slow refreshes, each 1 s after the last ended, may be fewer than 2 in it).
    const start = asked;
    await new Promise((r) => setTimeout(r, 3000));
    expect(asked - start).toBeLessThanOrEqual(4);
    await vi.waitFor(() => expect(asked - start).toBeGreaterThanOrEqual(2), EVENTUALLY);
  });

  it("the playground's key check the gateway never answers says so, not 'Checking the key…' for good", async () => {
    const page = await pages.open("/playground");
    await page.route("**/v1/models", () => {});
    await page.getByLabel("API key").fill(gw.key);
    await page.getByRole("button", { name: "Use key" }).click();
    await vi.waitFor(async () => expect(await page.locator("#status").textContent()).toBe("no answer from the gateway in 10 s"), { timeout: 15_000, interval: 100 });
    expect(await page.locator("#chat").isHidden()).toBe(true);
  }, 30_000);

  it("a key check answered with no model list (a JSON 200 without data, from something in front of the gateway) says so, and keeps nothing", async () => {
    const page = await pages.open("/playground");
    const errors = pageErrors(page);
    await page.route("**/v1/models", (r) => r.fulfill({ status: 200, contentType: "application/json", body: "{}" }));
    await page.getByLabel("API key").fill(gw.key);
    await page.getByRole("button", { name: "Use key" }).click();
    await expectKeyNotKept(page, "/v1/models answered with no model list (something other than the gateway may answer at this address)", "kvgate.apiKey", "#chat");
    expect(errors).toEqual([]);
  });

  it("the dashboard's key check answered with no group list (a JSON 200 from something in front of the gateway) says so, and keeps nothing", async () => {
    const page = await pages.open("/dashboard");
    const errors = pageErrors(page);
    await page.route("**/admin/v1/**", (r) => r.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify({ ok: true }) }));
    await page.getByLabel("Admin key").fill(adminKey);
    await page.getByLabel("Admin key").press("Enter");
    await expectKeyNotKept(page, "/admin/v1/groups answered with no group list (something other than the gateway may answer at this address)", "kvgate.adminKey", "#live");
    expect(errors).toEqual([]);
  });

  it("Clear while a reply streams: the next conversation starts empty", async () => {
    const page = await playground();
    const sent: string[] = [];
    page.on("request", (r) => {
      if (r.url().endsWith("/v1/chat/completions")) sent.push(r.postData() ?? "");
    });
    await send(page, GROUP, "the first conversation", 80);
    await vi.waitFor(async () => expect(((await lastReply(page).locator(".reply-text").textContent()) ?? "").length).toBeGreaterThan(5), EVENTUALLY);
    await page.getByRole("button", { name: "Clear conversation" }).click();
    await vi.waitFor(async () => expect(await page.getByRole("button", { name: "Send", exact: true }).isEnabled()).toBe(true), EVENTUALLY);
    await send(page, GROUP, "a new conversation", 4);
    await lastReply(page).locator('[data-send="1"]').waitFor();
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(sent).toHaveLength(2);
    expect((JSON.parse(sent[1] as string) as { messages: unknown }).messages).toEqual([{ role: "user", content: "a new conversation" }]);
  });

  it("a reply answered whole, as JSON, to the streamed request shows its text; a reasoning model's thinking shows apart from its answer", async () => {
    const page = await playground();
    const sent: string[] = [];
    page.on("request", (r) => {
      if (r.url().endsWith("/v1/chat/completions")) sent.push(r.postData() ?? "");
    });
    const thinking = () => lastReply(page).locator(".reply-thinking");
    await send(page, "whole-json", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe("HELLO FROM JSON");
    expect(await thinking().textContent()).toBe("Thinking: weighed it whole");
    expect(await page.locator("#status").textContent()).toMatch(/^Reply done/);
    await page.getByRole("button", { name: "Clear conversation" }).click();
    await send(page, "reasoning", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await thinking().textContent()).toBe("Thinking: thinking hard");
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe("the answer");
    // The answer goes back into the conversation; the thinking does not.
    await send(page, "reasoning", "and then?", 16);
    await vi.waitFor(async () => expect(sent).toHaveLength(3), EVENTUALLY);
    expect((JSON.parse(sent[2] as string) as { messages: unknown }).messages).toEqual([
      { role: "user", content: "hello" },
      { role: "assistant", content: "the answer" },
      { role: "user", content: "and then?" },
    ]);
  });

  it("a stream cut in the middle of an event shows the gateway's error, after the text that came", async () => {
    const page = await playground();
    await send(page, "cut", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    const text = (await lastReply(page).locator(".reply-text").textContent()) ?? "";
    expect(text).toMatch(/^first \[upstream stream failed: /);
    expect(text).not.toMatch(/JSON/);
    expect(await page.locator("#status").textContent()).toBe("The request failed.");
  });

  it("a stream that fails is let go: its upstream is cancelled and the backend's slot freed", async () => {
    const page = await playground();
    upstream.reset();
    await send(page, "erring", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe("first [the engine failed]");
    // The upstream would go on for ever: only the page's letting go ends it.
    await vi.waitFor(() => expect(upstream.stats("error-then-endless")).toMatchObject({ requests: 1, open: 0, cancelled: 1 }), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("erring")).toBe(0), EVENTUALLY);
  });

  it("an error event after the first token shows its message in TGI's shape too (a bare string), not 'the stream failed'", async () => {
    const page = await playground();
    await send(page, "tgi-erring", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe("first [the shard failed]");
  });

  it("a long reply is written into the page once, not once an event: 20,000 events add each character to the document once, in a few writes", async () => {
    const page = await playground();
    // Every character the page adds to the conversation: text in nodes it inserts, and what a text node grows by.
    await page.evaluate(() => {
      const w = window as unknown as { written: number; writes: number };
      w.written = 0;
      w.writes = 0;
      const seen = new WeakMap<Node, number>();
      const grown = (n: Node): number => {
        const now = n.nodeType === Node.TEXT_NODE ? (n as Text).length : 0;
        const before = seen.get(n) ?? 0;
        seen.set(n, now);
        return Math.max(0, now - before);
      };
      new MutationObserver((records) => {
        for (const r of records) {
          if (r.type === "characterData") {
            w.writes++;
            w.written += grown(r.target);
          }
          r.addedNodes.forEach((n) => {
            w.written += n.nodeType === Node.TEXT_NODE ? grown(n) : (n.textContent?.length ?? 0);
          });
        }
      }).observe(byIdOrFail("conversation"), { subtree: true, childList: true, characterData: true });
      function byIdOrFail(id: string): HTMLElement {
        const e = document.getElementById(id);
        if (!e) throw new Error(`no #${id}`);
        return e;
      }
    });
    await send(page, "long", "a long answer, please", 100_000);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), { timeout: 120_000, interval: 200 });
    const text = (await lastReply(page).locator(".reply-text").textContent()) ?? "";
    expect(text.startsWith("w0 w1 w2 ")).toBe(true);
    expect(text.endsWith("w19999 end")).toBe(true);
    expect(await page.locator("#status").textContent()).toMatch(/^Reply done/);
    const written = await page.evaluate(() => (window as unknown as { written: number }).written);
    // The reply and what is around it (the question, the route line): not the reply again with each event.
    expect(written).toBeLessThan(text.length + 1000);
    // And in a few writes, what came since the last (once a frame), not a write an event: each write
    // copies all the reply's text, and at an event a write a fast stream froze the tab for seconds.
    const writes = await page.evaluate(() => (window as unknown as { writes: number }).writes);
    console.log(`20,000 events written into the page in ${writes} writes`);
    expect(writes).toBeLessThan(2000);
  }, 150_000);

  it("a reply that never ends, as fast as it comes, stops at the most the playground shows: the page stays usable, and the request is let go", async () => {
    const page = await playground();
    upstream.reset();
    // 1 KiB events for ever, as fast as the connection takes them (tens of MB in seconds).
    await send(page, "firehose", "never stop", 100_000);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), { timeout: 30_000, interval: 200 });
    const shown = (await lastReply(page).locator(".reply-text").textContent()) ?? "";
    expect(shown).toMatch(/^x{1000000} \[cut at 1,000,000 characters: the playground shows no more of a reply\]$/);
    expect(await page.locator("#status").textContent()).toBe("Reply cut at 1,000,000 characters.");
    expect(await page.locator(".hint").getByText("A reply shows up to 1,000,000 characters").count()).toBe(1);
    // The upstream would go on for ever: the page let go of it, and the backend's slot is free.
    await vi.waitFor(() => expect(upstream.stats("firehose-stream")).toMatchObject({ requests: 1, open: 0, cancelled: 1 }), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("firehose")).toBe(0), EVENTUALLY);
    // The page still answers: the next message goes out and its reply shows.
    await send(page, GROUP, "still there?", 4);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await page.locator("#status").textContent()).toMatch(/^Reply done/);
  }, 60_000);

  it("Stop ends a reply that would never end: its upstream is cancelled and the backend's slot freed", async () => {
    const page = await playground();
    upstream.reset();
    await send(page, "endless", "go on", 100_000);
    await vi.waitFor(async () => expect(((await lastReply(page).locator(".reply-text").textContent()) ?? "").length).toBeGreaterThan(20), EVENTUALLY);
    expect(await gw.inFlight("endless")).toBe(1);
    await page.getByRole("button", { name: "Stop" }).click();
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await lastReply(page).locator(".reply-text").textContent()).toMatch(/^(tick)+ \[stopped\]$/);
    expect(await page.locator("#status").textContent()).toBe("Stopped.");
    await vi.waitFor(() => expect(upstream.stats("endless-stream")).toMatchObject({ requests: 1, open: 0, cancelled: 1 }), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("endless")).toBe(0), EVENTUALLY);
  });

  it("an event that never ends, passed on as it comes, is given up at the longest the playground holds: the page says so, and the request is let go", async () => {
    const page = await playground();
    upstream.reset();
    // A first event, then one that goes on as fast as it comes: no blank line ever ends it, and
    // the master key's stream passes it on untouched.
    await send(page, "unended", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), { timeout: 30_000, interval: 200 });
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe("first [an event longer than 8,000,000 characters: the playground reads no further]");
    expect(await page.locator("#status").textContent()).toBe("The request failed.");
    await vi.waitFor(() => expect(upstream.stats("endless-event")).toMatchObject({ requests: 1, open: 0, cancelled: 1 }), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("unended")).toBe(0), EVENTUALLY);
  }, 60_000);

  it("an answer whole as JSON that never ends is given up at the longest the playground holds: the page says so, and the request is let go", async () => {
    const page = await playground();
    // Read whole (res.json()), it grew in the tab until the tab froze, and the reply never ended.
    await send(page, "endless-json", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), { timeout: 30_000, interval: 200 });
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe(" [an answer longer than 8,000,000 characters: the playground reads no further]");
    expect(await page.locator("#status").textContent()).toBe("The request failed.");
    await vi.waitFor(() => expect(endlessJsonAnswers).toEqual({ requests: 1, open: 0 }), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("endless-json")).toBe(0), EVENTUALLY);
  }, 60_000);

  it("a stream whose lines end with a lone CR, or with a CRLF cut between two chunks, shows its reply", async () => {
    const page = await playground();
    // Lone CRs (legal SSE, which the gateway passes on): two events 300 ms apart, then [DONE].
    await send(page, "cr", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe("firstsecond");
    expect(await page.locator("#status").textContent()).toMatch(/^Reply done/);
    // An event of two data lines whose CRLF is cut: the CR ends one chunk, its LF begins the next;
    // the LF is the CR's other half, not a blank line ending the event in the middle.
    await send(page, "split-crlf", "hello", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(await lastReply(page).locator(".reply-text").textContent()).toBe("whole");
    expect(await page.locator("#status").textContent()).toMatch(/^Reply done/);
  });

  it("a reply of one very long word wraps in its box: the page never scrolls sideways, at a desktop's width or a phone's", async () => {
    const page = await playground();
    await send(page, "unbroken", "a 64 KiB word, please", 16);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    expect(((await lastReply(page).locator(".reply-text").textContent()) ?? "").length).toBeGreaterThan(64 * 1024);
    const width = () => page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
    for (const viewport of [{ width: 1280, height: 800 }, { width: 375, height: 800 }]) {
      await page.setViewportSize(viewport);
      const { scroll, client } = await width();
      expect(scroll, `at ${viewport.width} px`).toBeLessThanOrEqual(client);
    }
    // The same of a long word the person sends.
    await send(page, GROUP, "y".repeat(2000), 4);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    const { scroll, client } = await width();
    expect(scroll).toBeLessThanOrEqual(client);
  });

  it("a gateway gone mid-stream, and gone for good, is named as such on both pages, not as the browser's bare 'Failed to fetch'", async () => {
    // A gateway of its own, to stop under the pages.
    const own = await startTestGateway({ modelGroups: [{ name: GROUP, deployments: [{ id: "sim-0", baseUrl: fleet.urls[0] as string, model: "sim-7b" }] }] }, { KVGATE_ADMIN_KEY: adminKey }, { assets: true });
    let closed = false;
    try {
      const ownPages = await browserPages(own.url);
      try {
        const board = await ownPages.dashboard(adminKey, `[data-group="${GROUP}"] tr[data-deployment="sim-0"]`);
        const chat = await ownPages.playground(own.key);
        await send(chat, GROUP, "a long story, please", 200);
        const reply = lastReply(chat);
        await vi.waitFor(async () => expect(((await reply.locator(".reply-text").textContent()) ?? "").length).toBeGreaterThan(5), EVENTUALLY);
        await own.close();
        closed = true;
        await vi.waitFor(async () => expect(await reply.getAttribute("data-done")).toBe("true"), EVENTUALLY);
        expect(await reply.locator(".reply-text").textContent()).toMatch(/ \[the connection to the gateway was lost \(.+\)\]$/);
        expect(await chat.locator("#status").textContent()).toBe("The request failed.");
        // The next send finds nobody there.
        await send(chat, GROUP, "anyone there?", 4);
        await vi.waitFor(async () => expect(await lastReply(chat).getAttribute("data-done")).toBe("true"), EVENTUALLY);
        expect(await lastReply(chat).locator(".reply-text").textContent()).toMatch(/^ \[could not reach the gateway \(.+\)\]$/);
        await vi.waitFor(async () => expect(await board.locator("#status").textContent()).toMatch(/^Refresh failed: could not reach the gateway \(.+\)$/), EVENTUALLY);
        // The key stays kept: a gateway that is gone refused nothing.
        expect(await chat.evaluate(() => sessionStorage.getItem("kvgate.apiKey"))).toBe(own.key);
      } finally {
        await ownPages.close();
      }
    } finally {
      if (!closed) await own.close();
    }
  }, 60_000);

  it("a message of several lines shows as the lines it was typed in, as a reply's do", async () => {
    const page = await playground();
    await send(page, GROUP, "line one\n  line two, indented\n\nline four", 4);
    await vi.waitFor(async () => expect(await lastReply(page).getAttribute("data-done")).toBe("true"), EVENTUALLY);
    // innerText is the text as laid out: newlines and spaces collapsed by the page are gone from it.
    expect(await page.locator("#conversation li.user").last().innerText()).toBe("You: line one\n  line two, indented\n\nline four");
  });
});
