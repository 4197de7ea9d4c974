/**
 * The gateway (and the runtime's floor) served by Miniflare's API: one workerd, no dev proxy and
 * no per-request logging, so benchmarks measure the Worker and not the dev tool. The Worker is
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

const ROOT = resolve(import.meta.dirname, "..", "..");
const run = promisify(execFile);

export interface ServedWorker {
  url: string;
  dispose(): Promise<void>;
}

let bundle: Promise<string> | null = null;

/** Bundles workers/gateway once per process; returns the script's path. */
export function buildGateway(): Promise<string> {
  bundle ??= (async () => {
    const outdir = await mkdtemp(join(tmpdir(), "kvgate-bundle-"));
    const wrangler = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
    await run(process.execPath, [wrangler, "deploy", "--dry-run", "--outdir", outdir, "--config", join(ROOT, "wrangler.toml")], {
      cwd: ROOT,
      env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
    });
    return join(outdir, "index.js");
  })();
  return bundle;
}

async function serve(options: Record<string, unknown>): Promise<ServedWorker> {
  // Miniflare 5 takes a new option shape; the v4 shape wrangler produces is converted.
  const mf = new Miniflare(convertV4MiniflareOptions({ host: "127.0.0.1", port: 0, cf: false, ...options } as never));
  const url = (await mf.ready).href.replace(/\/$/, "");
  return { url, dispose: () => mf.dispose() };
}

export interface GatewayOptions {
  config: GatewayConfigInput;
  /** Sets KVGATE_MASTER_KEY; leave auth off (`devOpenOnLoopback`) to measure without it. */
  masterKey?: string;
  /** Extra env bindings (upstream API keys named by the config). */
  bindings?: Record<string, string>;
}

/** What wrangler.toml says about the runtime: compatibility settings and Durable Objects. */
function runtimeOptions(): Record<string, unknown> {
  const { workerOptions: w } = unstable_getMiniflareWorkerOptions(join(ROOT, "wrangler.toml"));
  return { compatibilityDate: w.compatibilityDate, compatibilityFlags: w.compatibilityFlags, durableObjects: w.durableObjects };
}

export async function startGateway(o: GatewayOptions): Promise<ServedWorker> {
  const scriptPath = await buildGateway();
  const bindings: Record<string, string> = { ...o.bindings, KVGATE_CONFIG: JSON.stringify(o.config) };
  if (o.masterKey) bindings.KVGATE_MASTER_KEY = o.masterKey;
  return serve({ ...runtimeOptions(), modules: true, scriptPath, modulesRoot: dirname(scriptPath), bindings });
}

/**
 * The runtime's floor: a Worker that only forwards to the upstream and returns its body — what
 * any proxy on this runtime costs at least.
 */
export async function startFloor(upstreamUrl: string): Promise<ServedWorker> {
  const { compatibilityDate, compatibilityFlags } = runtimeOptions();
  const script = `export default {
  async fetch(req) {
    const u = new URL(req.url);
    const up = await fetch(${JSON.stringify(upstreamUrl)} + u.pathname + u.search, { method: req.method, headers: req.headers, body: req.body });
    return new Response(up.body, up);
  },
};`;
  return serve({ compatibilityDate, compatibilityFlags, modules: true, script });
}
