import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";

/**
 * Debian's Chromium (`apt-get install chromium`; .ci/run installs it), driven by playwright-core,
 * which never downloads a browser of its own.
 */
export const CHROMIUM = "/usr/bin/chromium";

export function hasChromium(): boolean {
  return existsSync(CHROMIUM);
}

/** Headless; no sandbox (CI runs as root) and nothing that reaches out to Google's hosts. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: ["--disable-gpu", "--disable-quic", "--disable-background-networking", "--disable-component-update"] });
}
