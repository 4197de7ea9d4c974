import type { Browser, BrowserContext, Page } from "playwright-core";
import { launchChromium } from "../../bench/harness/chromium.ts";

/**
 * The gateway's pages in Chromium as a person opens them: each page in a context of its own (its
 * own sessionStorage), closed after each test; the dashboard and the playground entered with a
 * key typed into their forms.
 */
export interface BrowserPages {
  open(path: string): Promise<Page>;
  /** The dashboard with `adminKey` typed and sent with Enter, once `ready` (a selector) shows. */
  dashboard(adminKey: string, ready: string): Promise<Page>;
  /** The playground with `key` typed and used, once its model list shows. */
  playground(key: string): Promise<Page>;
  /** Closes every context opened since the last call (after each test). */
  closePages(): Promise<void>;
  close(): Promise<void>;
}

export async function browserPages(baseURL: string): Promise<BrowserPages> {
  const browser: Browser = await launchChromium();
  const contexts: BrowserContext[] = [];
  const open = async (path: string): Promise<Page> => {
    const context = await browser.newContext({ baseURL });
    contexts.push(context);
    const page = await context.newPage();
    await page.goto(path);
    return page;
  };
  return {
    open,
    async dashboard(adminKey, ready) {
      const page = await open("/dashboard");
      await page.getByLabel("Admin key").fill(adminKey);
      await page.getByLabel("Admin key").press("Enter");
      await page.locator(ready).waitFor();
      return page;
    },
    async playground(key) {
      const page = await open("/playground");
      await page.getByLabel("API key").fill(key);
      await page.getByRole("button", { name: "Use key" }).click();
      await page.getByLabel("Model").waitFor();
      return page;
    },
    closePages: async () => void (await Promise.all(contexts.splice(0).map((c) => c.close()))),
    close: () => browser.close(),
  };
}
