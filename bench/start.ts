/**
 * `npm start`: the simulated GPU fleet (4 workers on 127.0.0.1:9001-9004) and the gateway in
 * front of it on http://127.0.0.1:8787 on wrangler's dev server, with no debugger
 * (start/dev-worker.ts), with wrangler.toml's dev config and keys made for this run, each printed
 * as VARIABLE=<key>. Ctrl-C (or SIGTERM, or SIGHUP from a closed terminal) stops both.
 * `--port` / PORT and `--fleet-port` / KVGATE_FLEET_PORT move the ports (bench/start/options.ts).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { startFleet } from "./fleet/index.ts";
import { moveFleet, wranglerDevConfig } from "./harness/dev-config.ts";
import { freePort } from "./harness/free-port.ts";
import { newDevKeys } from "./start/api-key.ts";
import { readyBanner } from "./start/banner.ts";
import { writeKeysFile } from "./start/keys-file.ts";
import { readableLogLine } from "./start/log-lines.ts";
import { DEFAULT_FLEET_PORT, FLEET_WORKERS, HOST, MODEL, fleetUrls, startOptions, startUsage, wantsHelp } from "./start/options.ts";
import { portRefusal } from "./start/port-taken.ts";
import { WRANGLER_ENV_FILE_SETTINGS, wranglerDevArgs } from "./start/wrangler-dev.ts";

async function waitForHealth(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(url)).ok) return;
    } catch (e) {
      // Not listening yet; but a port fetch refuses ("bad port", one options.ts's list lacks) it would never reach.
      if ((e as { cause?: { message?: unknown } }).cause?.message === "bad port") throw new Error(`fetch refuses the port of ${url} ("bad port"); pick another with --port or PORT`);
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

function exited(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, timeoutMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** One line on stderr and a non-zero exit, with nothing left running: used before anything started. */
function fail(message: string): never {
  console.error(`kvgate: ${message}`);
  process.exit(1);
}

const argv = process.argv.slice(2);
if (wantsHelp(argv)) {
  console.log(startUsage());
  process.exit(0);
}
let options: ReturnType<typeof startOptions>;
let devConfig: ReturnType<typeof wranglerDevConfig>;
try {
  options = startOptions(process.env, argv);
  // Refuses, with the gateway's own message, a config the gateway would refuse.
  devConfig = wranglerDevConfig();
} catch (e) {
  fail((e as Error).message);
}
// A port something else holds (another npm start) fails here, before anything starts: wrangler
// would say so in several lines, after the fleet had started. startFleet closes what it started.
const port = await freePort(HOST, options.port).catch((e: unknown) => fail(portRefusal(e, options.port, { gateway: true })));
const fleet = await startFleet({ workers: FLEET_WORKERS, basePort: options.fleetPort, servedModelName: MODEL }).catch((e: unknown) =>
  fail(portRefusal(e, options.fleetPort, { gateway: false, fleetPort: options.fleetPort })),
);
console.log(`simulated GPU fleet: ${fleet.urls.join("  ")}`);
const shipped = fleetUrls(DEFAULT_FLEET_PORT);
const moved = fleet.urls.join(" ") === shipped.join(" ") ? null : moveFleet(devConfig, shipped, fleet.urls);
const keys = newDevKeys();
// The routing state lives as long as the fleet it describes: a new simulated fleet starts with
// empty caches, so prefix sets restored from an earlier run would be wrong, and two copies
// running side by side must not share one state directory.
const stateDir = await mkdtemp(join(tmpdir(), "kvgate-dev-state-"));
const keysFile = await writeKeysFile(devConfig.auth, keys);
// wrangler's dev server without the debugger `wrangler dev` opens to every local user.
const DEV_WORKER = join(import.meta.dirname, "start", "dev-worker.ts");
const args = wranglerDevArgs({ host: HOST, port, envFile: keysFile.path, persistTo: stateDir, config: moved });
const gateway = spawn(process.execPath, [DEV_WORKER, ...args], {
  // Its stdout carries the Worker's log lines: shown readably (bench/start/log-lines.ts).
  stdio: ["ignore", "pipe", "inherit"],
  // Offline-friendly: no fetch of Cloudflare's request.cf sample, no telemetry.
  env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false", ...WRANGLER_ENV_FILE_SETTINGS },
});

// The last resort: however this process ends (short of SIGKILL), even past a stop() that failed
// half-way or never ran (an error nothing handled: a closed pipe under `npm start | head`), the gateway
// does not run on without it, holding the port, and the keys and the state do not stay on disk.
// Only synchronous work runs here, and nothing in it may throw: an error would hide the one that ended it.
process.on("exit", () => {
  if (gateway.exitCode === null && gateway.signalCode === null) gateway.kill("SIGTERM");
  removeNow(() => keysFile.remove(), "its keys");
  removeNow(() => rmSync(stateDir, { recursive: true, force: true, maxRetries: 3 }), "its state");
});

/** Removes what `remove` does, saying on stderr when it could not (a folder workerd still writes in). */
function removeNow(remove: () => void, what: string): void {
  try {
    remove();
  } catch (e) {
    console.error(`kvgate: could not remove ${what}: ${(e as Error).message}`);
  }
}

createInterface({ input: gateway.stdout, crlfDelay: Infinity }).on("line", (line) => {
  const shown = readableLogLine(line);
  if (shown !== null) process.stdout.write(`${shown}\n`);
});

let stopping = false;
async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    try {
      gateway.kill("SIGTERM");
      await exited(gateway, 5000);
      await fleet.close();
      await rm(stateDir, { recursive: true, force: true });
    } catch (e) {
      console.error(`kvgate: while stopping: ${(e as Error).message}`);
      code ||= 1;
    } finally {
      // Whatever step failed, the keys do not stay behind.
      removeNow(() => keysFile.remove(), "its keys");
    }
  }
  process.exit(code);
}
// SIGHUP is what every process of the job gets when its terminal window closes or its ssh
// session drops; Node's default for it is to exit at once, without stop().
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => void stop(0));
gateway.on("error", (e) => {
  // Unhandled, it would end this process without stop(): the gateway could not be started or signalled.
  if (!stopping) {
    console.error(`kvgate: the gateway: ${e.message}`);
    void stop(1);
  }
});
gateway.on("exit", (code) => {
  if (!stopping) {
    console.error(`kvgate: the gateway exited (${code ?? "signal"})`);
    // Unasked, it is a failure whatever its code.
    void stop(code || 1);
  }
});

const url = `http://${HOST}:${port}`;
try {
  await waitForHealth(`${url}/health`, 60_000);
  if (!(await takesKey(url, keys.api))) throw new Error(`the gateway on ${url} refuses this run's key`);
} catch (e) {
  console.error(`kvgate: ${(e as Error).message}`);
  await stop(1);
}
console.log(readyBanner({ url, model: MODEL, workers: fleet.urls.length, keys }));
