/**
 * `npm start`: the simulated GPU fleet (4 workers on 127.0.0.1:9001-9004) and the gateway in
 * front of it on http://127.0.0.1:8787 under `wrangler dev`, with wrangler.toml's dev config and
 * a master key made for this run, printed as KVGATE_API_KEY=<key>. Ctrl-C stops both.
 */
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { startFleet } from "./fleet/index.ts";
import { wranglerDevConfig } from "./harness/dev-config.ts";
import { newApiKey } from "./start/api-key.ts";
import { readyBanner } from "./start/banner.ts";
import { DEFAULT_FLEET_PORT, DEFAULT_PORT, FLEET_WORKERS, HOST, MODEL } from "./start/options.ts";
import { wranglerDevArgs } from "./start/wrangler-dev.ts";

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

/** Whether the gateway that answers takes this run's key: the printed key must be one that works. */
async function takesKey(url: string, key: string): Promise<boolean> {
  const res = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  await res.arrayBuffer();
  return res.ok;
}

let devConfig: ReturnType<typeof wranglerDevConfig>;
try {
  // Refuses, with the gateway's own message, a config the gateway would refuse.
  devConfig = wranglerDevConfig();
} catch (e) {
  console.error(`npm start: ${(e as Error).message}`);
  process.exit(1);
}

const fleet = await startFleet({ workers: FLEET_WORKERS, basePort: DEFAULT_FLEET_PORT, servedModelName: MODEL });
console.log(`simulated GPU fleet: ${fleet.urls.join("  ")}`);
const key = newApiKey();

const wranglerBin = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
const args = wranglerDevArgs({ host: HOST, port: DEFAULT_PORT, masterKeyEnv: devConfig.auth.masterKeyEnv, key });
const gateway = spawn(process.execPath, [wranglerBin, ...args], {
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

const url = `http://${HOST}:${DEFAULT_PORT}`;
try {
  await waitForHealth(`${url}/health`, 60_000);
  if (!(await takesKey(url, key))) throw new Error(`the gateway on ${url} refuses this run's key`);
} catch (e) {
  console.error((e as Error).message);
  await stop(1);
}
console.log(readyBanner({ url, model: MODEL, workers: fleet.urls.length, key }));
