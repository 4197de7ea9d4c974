/**
 * The gateway (and the runtime's floor) served by Miniflare's API: one workerd, no dev proxy, no
 * dev-tool request logging and, through a direct socket, not Miniflare's entry Worker either, so
 * benchmarks measure the Worker and not the dev tool. The Worker is
 * bundled by wrangler exactly as `wrangler deploy` would, and its compatibility settings and
 * Durable Object bindings come from wrangler.toml.
 */
import { execFile } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { Miniflare, convertV4MiniflareOptions } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import type { GatewayConfigInput } from "../../src/config/schema.ts";
import { newMasterKey } from "./master-key.ts";
import { newWorkerd, workerdPids } from "./process-cpu.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const run = promisify(execFile);

export interface ServedWorker {
  url: string;
  /** With `inspect`: workerd's V8 inspector (ws://host:port/), for a CPU profile (bench/profile). */
  inspector?: string;
  /** With objectsApart: the workerd processes serving the Worker and its Durable Objects. */
  pids?: ApartPids;
  dispose(): Promise<void>;
}

export interface ApartPids {
  worker: number;
  object: number;
}

/** kvgate as served: every /v1 request needs `Authorization: Bearer <key>`. */
export interface ServedGateway extends ServedWorker {
  key: string;
  /** Each instance's own address (see GatewayOptions.instances); `url` is the first. */
  urls: string[];
}

const bundles = new Map<string, Promise<string>>();

/** Folders this process made for bundles: removed when it exits (only synchronous work runs then). */
const bundleFolders: string[] = [];
process.once("exit", () => {
  for (const folder of bundleFolders) rmSync(folder, { recursive: true, force: true });
});

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
      bundleFolders.push(outdir);
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
 * Several `workers` run in the one workerd, each its own Worker with its own direct socket;
 * `urls` follows their order (with `viaEntry`, the entry's address is the only one).
 */
async function serve(workers: Record<string, unknown>[], viaEntry = false, onLog?: LogSink, inspect = false): Promise<{ urls: string[]; inspector?: string; dispose(): Promise<void> }> {
  // Miniflare 5 takes a new option shape; the v4 shape wrangler produces is converted.
  const direct = viaEntry ? [] : [{ host: "127.0.0.1", port: 0 }];
  const logs = logOptions(onLog);
  const shaped = workers.length === 1 ? { unsafeDirectSockets: direct, ...workers[0] } : { workers: workers.map((w) => ({ unsafeDirectSockets: direct, ...w })) };
  const mf = new Miniflare(convertV4MiniflareOptions({ host: "127.0.0.1", port: 0, cf: false, ...(inspect ? { inspectorPort: 0 } : {}), ...logs, ...shaped } as never));
  const entry = await mf.ready;
  const urls = viaEntry ? [entry.href] : await Promise.all(workers.map(async (w) => (await mf.unsafeGetDirectURL(w.name as string | undefined)).href));
  const inspector = inspect ? (await mf.getInspectorURL()).href : undefined;
  return { urls: urls.map((u) => u.replace(/\/$/, "")), ...(inspector ? { inspector } : {}), dispose: () => mf.dispose() };
}

/** A Worker script's Durable Object bindings as wrangler.toml or a caller gives them: binding → class, or binding → { className }. */
type ObjectBindings = Record<string, string | { className: string; useSQLite?: boolean }>;

const OBJECTS_NAME = "objects";

/**
 * The Worker in one workerd and its Durable Objects in another, as production runs them (a
 * Worker's isolate and an object's are on different machines), so each process's CPU is one
 * side's. The Worker's bindings reach the other process through Miniflare's dev registry: a
 * stub object in the Worker's process that forwards each call over workerd's debug port — a hop
 * production does not have, so the Worker's process pays more here than a Worker does.
 * The objects' process runs the same script (its fetch handler unused).
 */
async function serveApart(worker: Record<string, unknown>, objects: ObjectBindings, onLog?: LogSink): Promise<ServedWorker & { pids: ApartPids }> {
  const registry = await mkdtemp(join(tmpdir(), "kvgate-registry-"));
  const shared = { host: "127.0.0.1", port: 0, cf: false, unsafeDevRegistryPath: registry, ...logOptions(onLog) };
  const started: Miniflare[] = [];
  const dispose = async () => {
    for (const mf of started.reverse()) await mf.dispose();
    await rm(registry, { recursive: true, force: true });
  };
  try {
    const start = async (options: Record<string, unknown>): Promise<{ mf: Miniflare; pid: number }> => {
      const before = workerdPids();
      const mf = new Miniflare(convertV4MiniflareOptions({ ...shared, ...options } as never));
      started.push(mf);
      await mf.ready;
      const pid = newWorkerd(before);
      if (pid === null) throw new Error("cannot tell which workerd was started (this reads /proc, Linux only)");
      return { mf, pid };
    };
    const home = await start({ ...worker, name: OBJECTS_NAME, durableObjects: objects });
    const remote = Object.fromEntries(Object.entries(objects).map(([binding, d]) => [binding, { className: typeof d === "string" ? d : d.className, scriptName: OBJECTS_NAME }]));
    const front = await start({ ...worker, name: "worker", durableObjects: remote, unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] });
    const url = (await front.mf.unsafeGetDirectURL("worker")).href.replace(/\/$/, "");
    return { url, pids: { worker: front.pid, object: home.pid }, dispose };
  } catch (e) {
    await dispose();
    throw e;
  }
}

async function serveOne(options: Record<string, unknown>, viaEntry = false, inspect = false): Promise<ServedWorker> {
  const { urls, inspector, dispose } = await serve([options], viaEntry, undefined, inspect);
  return { url: urls[0] as string, ...(inspector ? { inspector } : {}), dispose };
}

/** What workerd logs goes to `onLog`, or to the benchmarks' default sink. */
function logOptions(onLog?: LogSink): { handleStructuredLogs: (l: { level: string; message: string }) => void } {
  const sink = onLog ?? benchSink;
  return { handleStructuredLogs: (l) => sink(l.level, l.message) };
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
  /**
   * Gateway instances, as separate edge isolates are (default 1): copies of the Worker in one
   * workerd, each its own Worker (its own isolate, module state and caches) on its own socket,
   * every copy bound to the first one's Durable Object classes, so they share the group's
   * routing object, the fleet registry and the tenants object as every isolate does in production.
   */
  instances?: number;
  /** Serve the Durable Objects in a workerd of their own (serveApart), to tell the Worker's CPU from the objects'. */
  objectsApart?: boolean;
  /** Open workerd's V8 inspector (ServedWorker.inspector), for a CPU profile. */
  inspect?: boolean;
  /** Bind KVGATE_CONFIG as an object, as wrangler binds a `[vars.KVGATE_CONFIG]` table, not as JSON text. */
  configAsTable?: boolean;
}

/** What wrangler.toml says about the runtime: compatibility settings, Durable Objects and, when asked, the static assets. */
function runtimeOptions(assets = false): Record<string, unknown> {
  const { workerOptions: w } = unstable_getMiniflareWorkerOptions(join(ROOT, "wrangler.toml"));
  return { compatibilityDate: w.compatibilityDate, compatibilityFlags: w.compatibilityFlags, durableObjects: w.durableObjects, ...(assets ? { assets: w.assets } : {}) };
}

export async function startGateway(o: GatewayOptions): Promise<ServedGateway> {
  const instances = o.instances ?? 1;
  if (!Number.isInteger(instances) || instances < 1) throw new Error(`instances must be a positive integer, got ${instances}`);
  if (instances > 1 && o.assets) throw new Error("several gateway instances are served without the assets");
  const scriptPath = o.scriptPath ?? (await buildGateway(o.root));
  const key = o.masterKey ?? newMasterKey("bench");
  const bindings: Record<string, unknown> = { ...o.bindings, KVGATE_CONFIG: o.configAsTable ? o.config : JSON.stringify(o.config), KVGATE_MASTER_KEY: key };
  const worker = { ...runtimeOptions(o.assets), modules: true, scriptPath, modulesRoot: dirname(scriptPath), bindings };
  if (o.objectsApart) {
    if (instances > 1 || o.assets || o.inspect) throw new Error("objectsApart serves one instance without the assets or the inspector");
    const { durableObjects, ...rest } = worker as typeof worker & { durableObjects?: ObjectBindings };
    const apart = await serveApart(rest, durableObjects ?? {}, o.onLog);
    return { ...apart, urls: [apart.url], key };
  }
  const copies = instances === 1 ? [worker] : Array.from({ length: instances }, (_, i) => instanceOf(worker, i));
  const served = await serve(copies, false, o.onLog, o.inspect);
  return { url: served.urls[0] as string, urls: served.urls, key, ...(served.inspector ? { inspector: served.inspector } : {}), dispose: served.dispose };
}

const instanceName = (i: number): string => `kvgate-${i}`;

/** Copy `i` of the gateway Worker: the first owns the Durable Object classes, the others bind to them. */
function instanceOf(worker: Record<string, unknown> & { durableObjects?: unknown }, i: number): Record<string, unknown> {
  if (i === 0) return { ...worker, name: instanceName(0) };
  const owned = (worker.durableObjects ?? {}) as Record<string, string | { className: string }>;
  const durableObjects = Object.fromEntries(
    Object.entries(owned).map(([binding, d]) => [binding, { className: typeof d === "string" ? d : d.className, scriptName: instanceName(0) }]),
  );
  return { ...worker, name: instanceName(i), durableObjects };
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
    { viaEntry },
  );
}

export interface ScriptWorkerOptions {
  /** Behind Miniflare's entry Worker rather than on a direct socket. */
  viaEntry?: boolean;
  /** Its Durable Objects in a workerd of their own (serveApart). */
  objectsApart?: boolean;
  /** workerd's V8 inspector open (ServedWorker.inspector). */
  inspect?: boolean;
}

/**
 * A one-module Worker given as source, with kvgate's compatibility settings; `durableObjects`
 * binds names to classes the script exports (SQLite-backed, as kvgate's are).
 */
export function startScriptWorker(script: string, durableObjects: Record<string, string> = {}, o: ScriptWorkerOptions = {}): Promise<ServedWorker> {
  const { compatibilityDate, compatibilityFlags } = runtimeOptions();
  const bound = Object.fromEntries(Object.entries(durableObjects).map(([name, className]) => [name, { className, useSQLite: true }]));
  const worker = { compatibilityDate, compatibilityFlags, modules: true, script };
  if (o.objectsApart && (o.viaEntry || o.inspect)) throw new Error("objectsApart serves on a direct socket without the inspector");
  return o.objectsApart ? serveApart(worker, bound) : serveOne({ ...worker, durableObjects: bound }, o.viaEntry, o.inspect);
}
