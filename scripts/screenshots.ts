/**
 * `npm run screenshots`: docs/dashboard.png and docs/playground.png, taken in headless Chromium
 * (Debian's, /usr/bin/chromium) of the pages as they look under load: the simulated 4-GPU fleet
 * and the gateway with npm start's dev config, its pages served as static assets, a virtual key
 * streaming chats at 10 in flight while the shots are taken.
 */
import { randomBytes } from "node:crypto";
import { stat } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import type { Page } from "playwright-core";
import { startFleet } from "../bench/fleet/index.ts";
import { startChatLoad, type ChatLoad } from "../bench/harness/chat-load.ts";
import { CHROMIUM, hasChromium, launchChromium } from "../bench/harness/chromium.ts";
import { moveFleet, wranglerDevConfig } from "../bench/harness/dev-config.ts";
import { startGateway } from "../bench/harness/gateway.ts";
import { DEFAULT_FLEET_PORT, FLEET_WORKERS, MODEL, fleetUrls } from "../bench/start/options.ts";

const ROOT = resolve(import.meta.dirname, "..");
const DOCS = join(ROOT, "docs");

if (!hasChromium()) {
  console.error(`npm run screenshots: ${CHROMIUM} is missing (apt-get install -y --no-install-recommends chromium)`);
  process.exit(1);
}

const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const fleet = await startFleet({ workers: FLEET_WORKERS, basePort: 0, servedModelName: MODEL });
const gw = await startGateway({ config: moveFleet(wranglerDevConfig(), fleetUrls(DEFAULT_FLEET_PORT), fleet.urls), assets: true, bindings: { KVGATE_ADMIN_KEY: adminKey } });
const browser = await launchChromium();
let load: ChatLoad | null = null;

async function admin<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} /admin/v1${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

async function shoot(page: Page, name: string): Promise<void> {
  const path = join(DOCS, name);
  await page.screenshot({ path, fullPage: true });
  console.log(`${relative(ROOT, path)}  ${Math.round((await stat(path)).size / 1024)} KiB`);
}

async function replyDone(page: Page, send: number): Promise<void> {
  const reply = page.locator("#conversation li.assistant").last();
  await reply.locator(`[data-send="${send}"]`).waitFor();
  await page.waitForFunction(() => document.querySelector("#conversation li.assistant:last-child")?.getAttribute("data-done") === "true");
}

try {
  const app = await admin<{ id: string; key: string }>("POST", "/keys", { name: "support-bot", models: [MODEL], rpm: 600, tpm: 500_000, max_parallel: 32 });
  await admin("POST", "/keys", { name: "nightly-evals", budget_tokens: 5_000_000, budget_period: "month" });
  load = startChatLoad({ url: gw.url, key: app.key, model: MODEL, concurrency: 10, maxTokens: 64 });
  await new Promise((r) => setTimeout(r, 4000));

  const context = await browser.newContext({ baseURL: gw.url, viewport: { width: 1280, height: 900 } });
  const dashboard = await context.newPage();
  await dashboard.goto("/dashboard");
  await dashboard.getByLabel("Admin key").fill(adminKey);
  await dashboard.getByLabel("Admin key").press("Enter");
  await dashboard.locator("tr[data-deployment]").first().waitFor();
  await dashboard.getByRole("button", { name: `Usage of ${app.id}` }).click();
  await new Promise((r) => setTimeout(r, 2500));
  await shoot(dashboard, "dashboard.png");

  const playground = await context.newPage();
  await playground.goto("/playground");
  await playground.getByLabel("API key").fill(gw.key);
  await playground.getByRole("button", { name: "Use key" }).click();
  await playground.getByLabel("Model").waitFor();
  await playground.getByLabel("System prompt").fill("You are a support agent for a bicycle shop. Answer in two sentences.");
  await playground.getByLabel("Message").fill("My chain skips under load. What should I check first?");
  await playground.getByLabel("Max tokens").fill("48");
  await playground.getByRole("button", { name: "Send", exact: true }).click();
  await replyDone(playground, 1);
  await playground.getByRole("button", { name: "Send again" }).click();
  await replyDone(playground, 2);
  await shoot(playground, "playground.png");
} finally {
  await load?.stop();
  await browser.close();
  await gw.dispose();
  await fleet.close();
}
