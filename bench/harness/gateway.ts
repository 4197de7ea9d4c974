/**
 * The gateway (and the runtime's floor) served by Miniflare's API: one workerd, no dev proxy, no
 * dev-tool request logging and, through a direct socket, not Miniflare's entry Worker either, so
 * benchmarks measure the Worker and not the dev tool. The Worker is
 * bundled by wrangler exactly as `wrangler deploy` would, and its compatibility settings and
 * Durable Object bindings come from wrangler.toml.
 */
import { execFile } from "node:child_process";
import { mkdtemp } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { Miniflare, convertV4MiniflareOptions } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import type { GatewayConfigInput } from "../../src/config/schema.ts";
import { newMasterKey } from "./master-key.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const run = promisify(execFile);

export interface ServedWorker {
  url: string;
  dispose(): Promise<void>;
}

/** kvgate as served: every /v1 request needs `Authorization: Bearer <key>`. */
export interface ServedGateway extends ServedWorker {
  key: string;
}

const bundles = new Map<string, Promise<string>>();

/**
 * Bundles workers/gateway of the checkout at `root` (this one by default) once per process, with
 * this checkout's wrangler; returns the script's path. Another root lets a benchmark compare two
 * commits in one run.
 */
export function buildGateway(root: string = ROOT): Promise<string> {
  let bundle = bundles.get(root);
  if (!bundle) {
    bundle = (async () => {
      const outdir = await mkdtemp(join(tmpdir(), "kvgate-bundle-"));
      const wrangler = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
      await run(process.execPath, [wrangler, "deploy", "--dry-run", "--outdir", outdir, "--config", join(root, "wrangler.toml")], {
        cwd: root,
        env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
      });
      return join(outdir, "index.js");
    })();
    bundles.set(root, bundle);
  }
  return bundle;
}

/**
 * A direct socket serves the Worker itself. Miniflare's own address goes through its entry Worker
 * first, a dev-tool hop (one more Worker call per request) that production never has: it costs
 * about as much CPU as the whole pass-through (bench:ceiling's floor-via-entry shows it).
 */
async function serve(options: Record<string, unknown>, viaEntry = false, onLog?: LogSink): Promise<ServedWorker> {
  // Miniflare 5 takes a new option shape; the v4 shape wrangler produces is converted.
  const direct = viaEntry ? [] : [{ host: "127.0.0.1", port: 0 }];
  const sink = onLog ?? benchSink;
  const logs = { handleStructuredLogs: (l: { level: string; message: string }) => sink(l.level, l.message) };
  const mf = new Miniflare(convertV4MiniflareOptions({ host: "127.0.0.1", port: 0, cf: false, unsafeDirectSockets: direct, ...logs, ...options } as never));
  const entry = await mf.ready;
  const url = (viaEntry ? entry : await mf.unsafeGetDirectURL()).href.replace(/\/$/, "");
  return { url, dispose: () => mf.dispose() };
}

/** Receives what workerd logs (the Worker's console and the runtime's own lines) instead of stderr. */
export type LogSink = (level: string, message: string) => void;

/**
 * A benchmark's default: the Worker still writes every request line (its cost is kvgate's, as it
 * is under Workers Logs), but a line a second per request is not printed — the terminal would
 * cost the benchmark's own process more than the Worker. Warnings and errors still show.
 */
const benchSink: LogSink = (level, message) => {
  if (level === "warn" || level === "error") process.stderr.write(`${message}\n`);
};

export interface GatewayOptions {
  config: GatewayConfigInput;
  /** KVGATE_MASTER_KEY; a fresh one when not given (kvgate has no keyless mode). */
  masterKey?: string;
  /** Extra env bindings (upstream API keys named by the config). */
  bindings?: Record<string, string>;
  /** Serve the gateway of another checkout (see buildGateway). */
  root?: string;
  /** A bundle already built by buildGateway (a test run builds it once for all its files). */
  scriptPath?: string;
  onLog?: LogSink;
  /**
   * Serve wrangler.toml's [assets] too (the pages: /, /dashboard, /playground), as Cloudflare
   * does: Miniflare's asset router then takes every request first, its run_worker_first paths
   * included. That is one more Worker hop per request on this machine, so benchmarks leave it off.
   */
  assets?: boolean;
}

/** What wrangler.toml says about the runtime: compatibility settings, Durable Objects and, when asked, the static assets. */
function runtimeOptions(assets = false): Record<string, unknown> {
  const { workerOptions: w } = unstable_getMiniflareWorkerOptions(join(ROOT, "wrangler.toml"));
  return { compatibilityDate: w.compatibilityDate, compatibilityFlags: w.compatibilityFlags, durableObjects: w.durableObjects, ...(assets ? { assets: w.assets } : {}) };
}

export async function startGateway(o: GatewayOptions): Promise<ServedGateway> {
  const scriptPath = o.scriptPath ?? (await buildGateway(o.root));
  const key = o.masterKey ?? newMasterKey("bench");
  const bindings: Record<string, string> = { ...o.bindings, KVGATE_CONFIG: JSON.stringify(o.config), KVGATE_MASTER_KEY: key };
  const served = await serve({ ...runtimeOptions(o.assets), modules: true, scriptPath, modulesRoot: dirname(scriptPath), bindings }, false, o.onLog);
  return { ...served, key };
}

/**
 * The runtime's floor: a Worker that only forwards to the upstream and returns its body — what
 * any proxy on this runtime costs at least. `viaEntry`: behind Miniflare's entry Worker instead.
 */
export function startFloor(upstreamUrl: string, viaEntry = false): Promise<ServedWorker> {
  return startScriptWorker(
    `export default {
  async fetch(req) {
    const u = new URL(req.url);
    const up = await fetch(${JSON.stringify(upstreamUrl)} + u.pathname + u.search, { method: req.method, headers: req.headers, body: req.body });
    return new Response(up.body, up);
  },
};`,
    {},
    viaEntry,
  );
}

/**
 * A one-module Worker given as source, with kvgate's compatibility settings; `durableObjects`
 * binds names to classes the script exports (SQLite-backed, as kvgate's are).
 */
export function startScriptWorker(script: string, durableObjects: Record<string, string> = {}, viaEntry = false): Promise<ServedWorker> {
  const { compatibilityDate, compatibilityFlags } = runtimeOptions();
  const bound = Object.fromEntries(Object.entries(durableObjects).map(([name, className]) => [name, { className, useSQLite: true }]));
  return serve({ compatibilityDate, compatibilityFlags, modules: true, script, durableObjects: bound }, viaEntry);
}
