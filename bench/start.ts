/**
 * `npm start`: the simulated GPU fleet (4 workers on 127.0.0.1:9001-9004) and the gateway in
 * front of it on http://127.0.0.1:8787 under `wrangler dev`, with wrangler.toml's dev config.
 * Ctrl-C stops both.
 */
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { startFleet } from "./fleet/index.ts";

const HOST = "127.0.0.1";
const PORT = 8787;
const FLEET_BASE_PORT = 9001;
const MODEL = "kvgate-sim";

async function waitForHealth(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`the gateway did not answer ${url} within ${timeoutMs / 1000} s`);
}

const fleet = await startFleet({ workers: 4, basePort: FLEET_BASE_PORT, servedModelName: MODEL });
console.log(`simulated GPU fleet: ${fleet.urls.join("  ")}`);

const wranglerBin = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
const gateway = spawn(process.execPath, [wranglerBin, "dev", "--ip", HOST, "--port", String(PORT), "--log-level", "warn", "--show-interactive-dev-session=false"], {
  stdio: ["ignore", "inherit", "inherit"],
  // Offline-friendly: no fetch of Cloudflare's request.cf sample, no telemetry.
  env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
});

let stopping = false;
async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    gateway.kill("SIGTERM");
    await fleet.close();
  }
  process.exit(code);
}
process.on("SIGINT", () => void stop(0));
process.on("SIGTERM", () => void stop(0));
gateway.on("exit", (code) => {
  if (!stopping) {
    console.error(`wrangler dev exited (${code ?? "signal"})`);
    void stop(code ?? 1);
  }
});

try {
  await waitForHealth(`http://${HOST}:${PORT}/health`, 60_000);
} catch (e) {
  console.error((e as Error).message);
  await stop(1);
}
console.log(`
kvgate is up on http://${HOST}:${PORT}  (model "${MODEL}", ${fleet.urls.length} simulated GPU workers)
DEV MODE: auth is off for requests addressed to a loopback host (wrangler.toml: auth.devOpenOnLoopback).

  curl -N http://${HOST}:${PORT}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"${MODEL}","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'

Ctrl-C stops the gateway and the fleet.`);
