/**
 * The Workers-runtime targets, all in front of the same simulated fleet: the fleet itself
 * (direct), the runtime's floor (a bare pass-through Worker), and kvgate three ways — no hooks and
 * the restamp hook, each checking its master key on every request, and no hooks with a virtual key
 * (key-target.ts) instead. Peers live in bench/peers/.
 */
import { performance } from "node:perf_hooks";
import type { GatewayConfigInput } from "../../src/config/schema.ts";
import { ceilingScript, TOY_ROUTER_BINDING } from "../harness/ceiling-worker.ts";
import { startFloor, startGateway, startScriptWorker, type ApartPids } from "../harness/gateway.ts";
import { chatBodies } from "./bodies.ts";
import { BENCH_KEY, confirmKeyUsage, createVirtualKey, newAdminKey, type KeySettings } from "./key-target.ts";

export const TARGET_NAMES = ["direct", "floor", "ceiling", "kvgate", "kvgate-nolog", "kvgate-restamp", "kvgate-key", "kvgate-feedback", "kvgate-sharded", "kvgate-priority", "ceiling-apart", "kvgate-apart", "litellm", "portkey"] as const;
export type TargetName = (typeof TARGET_NAMES)[number];

export interface Target {
  name: TargetName;
  /** Distinguishes two runs of one target (LiteLLM with 1 worker and with one per core). */
  label: string;
  /** Origin, e.g. http://127.0.0.1:41873. */
  url: string;
  /** The model name the client sends. */
  model: string;
  /** Request headers the target needs (auth, peer routing). */
  headers: Record<string, string>;
  /** GET this for the Durable Object's call counters; kvgate targets only. */
  status: { url: string; headers: Record<string, string> } | null;
  /**
   * After the warm-up: checks that the target did what its name says (kvgate-key: the key's usage
   * was recorded) and describes what it found; throws otherwise.
   */
  confirm?: () => Promise<string>;
  /** LiteLLM's worker processes; recorded in its runs. */
  workers?: number;
  /** A peer's pinned version. */
  version?: string;
  /** Served with its Durable Objects in a workerd of their own: both processes. */
  pids?: ApartPids;
  /** The workerd serving it (its Worker's, when apart), whose CPU time its runs report (run.ts finds it as the target starts). */
  pid?: number;
  /** Only these scenarios (measure.ts scenarioKey); all when not given. */
  scenarios?: readonly string[];
  /** Served with workerd's V8 inspector open (KvgateOptions.inspect). */
  inspector?: string;
  stop(): Promise<void>;
}

export const COMPLETIONS_PATH = "/v1/chat/completions";
/** The model the simulated fleet serves. */
export const SIM_MODEL = "kvgate-sim";
/** What restamp clients ask for: not the upstream's name, so every chunk is rewritten. */
const RESTAMP_CLIENT_MODEL = "bookshop-assistant";

function kvgateConfig(upstreams: string[], o: { name: string; hooks: "restamp"[]; logRequests: boolean; feedbackRate: number; shards: number; priority: boolean }): GatewayConfigInput {
  return {
    ...(o.logRequests ? {} : { logging: { requests: { sampleRate: 0 } } }),
    modelGroups: [
      {
        name: o.name,
        hooks: o.hooks,
        ...(o.feedbackRate > 0 ? { feedback: { sampleRate: o.feedbackRate } } : {}),
        ...(o.shards > 1 ? { shards: o.shards } : {}),
        // Every fleet worker is a deployment, so the route call does the real prefix-aware work.
        deployments: upstreams.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: SIM_MODEL, ...(o.priority ? { schedulingPolicy: "priority" as const } : {}) })),
      },
    ],
  };
}

export function directTarget(upstream: string): Target {
  return { name: "direct", label: "direct", url: upstream, model: SIM_MODEL, headers: {}, status: null, stop: async () => {} };
}

export async function floorTarget(upstream: string): Promise<Target> {
  const w = await startFloor(upstream);
  return { name: "floor", label: "floor", url: w.url, model: SIM_MODEL, headers: {}, status: null, stop: () => w.dispose() };
}

/**
 * ceiling: the floor plus reading the body and one RPC to a toy router (harness/ceiling-worker.ts),
 * the least any prefix-routing gateway does. ceiling-apart: the same with its router in a workerd
 * of its own, so that the object's CPU can be told from the Worker's.
 */
export async function ceilingTarget(upstream: string, o: { objectsApart?: boolean; inspect?: boolean } = {}): Promise<Target> {
  const w = await startScriptWorker(ceilingScript(upstream), TOY_ROUTER_BINDING, o);
  const name = o.objectsApart ? "ceiling-apart" : "ceiling";
  return { name, label: name, url: w.url, model: SIM_MODEL, headers: {}, status: null, stop: () => w.dispose(), ...(w.pids ? { pids: w.pids } : {}), ...(w.inspector ? { inspector: w.inspector } : {}) };
}

/**
 * kvgate-nolog: the default config but with no request lines, so that kvgate − kvgate-nolog is
 * what logging costs. kvgate-feedback: every answer's usage read for routing to learn from
 * (feedback.sampleRate 1), so that kvgate-feedback − kvgate is what a sampled request costs; a
 * rate r costs r times that on average. kvgate-sharded: the group over 2 routing objects, one
 * fleet worker each, so that kvgate-sharded − kvgate is what choosing a shard costs the Worker
 * (and what two objects cost where one did). kvgate-priority: every deployment's schedulingPolicy
 * "priority", so that kvgate-priority − kvgate is what setting each request's priority costs.
 */
export type KvgateVariant = "kvgate" | "kvgate-nolog" | "kvgate-restamp" | "kvgate-key" | "kvgate-feedback" | "kvgate-sharded" | "kvgate-priority" | "kvgate-apart";

export interface KvgateOptions {
  /** The checkout to bundle the gateway from (this one by default). */
  root?: string;
  /** The virtual key kvgate-key makes (BENCH_KEY by default). */
  keySettings?: KeySettings;
  /** Its Durable Objects in a workerd of their own (Target.pids). */
  objectsApart?: boolean;
  /** workerd's V8 inspector open (Target.inspector). */
  inspect?: boolean;
}

/** kvgate-apart: kvgate with its objects apart (KvgateOptions.objectsApart). */
export async function kvgateTarget(variant: KvgateVariant, upstreams: string[], o: KvgateOptions = {}): Promise<Target> {
  const { root, keySettings = BENCH_KEY, inspect = false } = o;
  const objectsApart = o.objectsApart === true || variant === "kvgate-apart";
  const restamp = variant === "kvgate-restamp";
  const model = restamp ? RESTAMP_CLIENT_MODEL : SIM_MODEL;
  const config = kvgateConfig(upstreams, { name: model, hooks: restamp ? ["restamp"] : [], logRequests: variant !== "kvgate-nolog", feedbackRate: variant === "kvgate-feedback" ? 1 : 0, shards: variant === "kvgate-sharded" ? 2 : 1, priority: variant === "kvgate-priority" });
  const adminKey = variant === "kvgate-key" ? newAdminKey() : null;
  const w = await startGateway({ config, objectsApart, inspect, ...(root ? { root } : {}), ...(adminKey ? { bindings: { KVGATE_ADMIN_KEY: adminKey } } : {}) });
  const master = { authorization: `Bearer ${w.key}` };
  const target: Target = { name: variant, label: variant, url: w.url, model, headers: master, status: { url: `${w.url}/v1/kvgate/status`, headers: master }, stop: () => w.dispose(), ...(w.pids ? { pids: w.pids } : {}), ...(w.inspector ? { inspector: w.inspector } : {}) };
  if (!adminKey) return target;
  try {
    const key = await createVirtualKey(w.url, adminKey, keySettings);
    target.headers = { authorization: `Bearer ${key.key}` };
    if (keySettings.track_usage) target.confirm = async () => `usage of key ${key.id}: ${await confirmKeyUsage(w.url, adminKey, key.id)} requests recorded`;
    return target;
  } catch (e) {
    await w.dispose();
    throw e;
  }
}

export interface ColdStart {
  /** new Miniflare → ready to accept connections. */
  readyMs: number;
  /** new Miniflare → first completion answered (config parse, isolate and Durable Object start). */
  firstResponseMs: number;
}

/**
 * Time from a new Miniflare (bundle already built) to the first answered request. Locally this
 * is workerd's process start plus the isolate's; on Cloudflare only the isolate part applies.
 */
export async function measureColdStart(start: () => Promise<Target>): Promise<ColdStart> {
  const t0 = performance.now();
  const target = await start();
  const readyMs = performance.now() - t0;
  try {
    const body = chatBodies({ model: target.model, stream: false, maxTokens: 4 })[0] as string;
    const res = await fetch(target.url + COMPLETIONS_PATH, { method: "POST", headers: { "content-type": "application/json", ...target.headers }, body });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`cold-start request answered ${res.status}`);
    return { readyMs, firstResponseMs: performance.now() - t0 };
  } finally {
    await target.stop();
  }
}

/** Sum of the Durable Object's route and release calls over every group. */
export async function doCalls(target: Target): Promise<number | null> {
  if (!target.status) return null;
  const res = await fetch(target.status.url, { headers: target.status.headers });
  if (!res.ok) throw new Error(`status endpoint answered ${res.status}`);
  const status = (await res.json()) as { groups: { calls: { route: number; release: number } }[] };
  let n = 0;
  for (const g of status.groups) n += g.calls.route + g.calls.release;
  return n;
}
