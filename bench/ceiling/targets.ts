/**
 * bench:ceiling's targets, each in its own workerd: the floor, the floor with parts of a routing
 * gateway's unavoidable work added (a toy Durable Object router, reading the body), and kvgate
 * with its master key, with a virtual key, and as bundled from other checkouts (--baseline).
 */
import { floorRoute, TOY_ROUTER_BINDING } from "../harness/ceiling-worker.ts";
import { startFloor, startScriptWorker, type ApartPids, type ServedWorker } from "../harness/gateway.ts";
import { BENCH_KEY_NO_USAGE } from "../overhead/key-target.ts";
import { ceilingTarget, floorTarget, kvgateTarget, SIM_MODEL } from "../overhead/targets.ts";
import { servedBy } from "../harness/process-cpu.ts";

export const BASE_TARGETS = ["floor", "floor+pipe", "floor+ttft", "floor-via-entry", "floor+route", "floor+body+route", "kvgate", "kvgate-nolog", "kvgate-key-nousage", "kvgate-key", "floor+body+route-apart", "kvgate-apart"] as const;
/** Targets served with their Durable Objects in a workerd of their own (harness serveApart): their runs split the CPU. */
export const APART_OF: Partial<Record<Name, Name>> = { "floor+body+route-apart": "floor+body+route", "kvgate-apart": "kvgate" };
/**
 * What a streamed run measures: the floor and the kvgate targets. kvgate-restamp is there because
 * its chunks take the same JavaScript read loop as a key's, with a transform that does little:
 * beside it, a key's per-chunk cost splits into that loop's and the usage reading's own.
 * floor+pipe and floor+ttft give what timing the first byte costs a stream.
 */
export const STREAM_TARGETS = ["floor", "floor+pipe", "floor+ttft", "kvgate", "kvgate-restamp", "kvgate-key"] as const;
export type Name = (typeof BASE_TARGETS)[number] | (typeof STREAM_TARGETS)[number] | `kvgate@${string}`;

const DOES: Record<Exclude<Name, `kvgate@${string}`>, string> = {
  floor: "passes the request through",
  "floor+pipe": "+ relays the body through a stream of its own, natively piped (what kvgate's fast path does to see a body end)",
  "floor+ttft": "+ reads the body's first chunk in JavaScript, then pipes the rest (kvgate's TTFT timing of a stream)",
  "floor-via-entry": "the same, behind Miniflare's entry Worker (a dev-tool hop)",
  "floor+route": "+ one Durable Object RPC (toy router)",
  "floor+body+route": "+ reads and re-serialises the JSON body",
  kvgate: "validates, fingerprints, routes, streams back",
  "floor+body+route-apart": "floor+body+route with its toy router in a workerd of its own (CPU per side)",
  "kvgate-apart": "kvgate with its Durable Objects in a workerd of their own (CPU per side)",
  "kvgate-nolog": "kvgate with its request lines off (logging.requests.sampleRate 0)",
  "kvgate-restamp": "kvgate with the restamp hook: every chunk through its JavaScript read loop",
  "kvgate-key-nousage": "kvgate with a virtual key checked, rpm and in-flight limits, no usage (native pipe)",
  "kvgate-key": "kvgate with a virtual key: key check, limits, usage read and recorded",
};

export const does = (t: Name): string => (t.startsWith("kvgate@") ? `kvgate as of ${t.slice("kvgate@".length)} (--baseline)` : DOES[t as keyof typeof DOES]);

/**
 * The floor, relaying the upstream's body through an IdentityTransformStream the way kvgate's fast
 * path does (src/stream/relay.ts relayNative); with `timeFirst`, JavaScript first reads and writes
 * the first chunk and notes its time, as kvgate does for TTFT. The difference between the two is
 * what timing the first byte costs.
 */
function floorPipe(upstream: string, timeFirst: boolean): string {
  const first = timeFirst
    ? `const reader = up.body.getReader();
      const first = await reader.read();
      reader.releaseLock();
      if (!first.done && first.value.byteLength > 0) {
        ttftMs = Date.now() - sentAt;
        const w = pipe.writable.getWriter();
        await w.write(first.value);
        w.releaseLock();
      }
      `
    : "";
  return `export default {
  async fetch(req, env, ctx) {
    const u = new URL(req.url);
    const sentAt = Date.now();
    const up = await fetch(${JSON.stringify(upstream)} + u.pathname, { method: req.method, headers: req.headers, body: req.body });
    const pipe = new IdentityTransformStream();
    let ttftMs = null;
    ctx.waitUntil((async () => {
      ${first}await up.body.pipeTo(pipe.writable);
      return ttftMs;
    })());
    return new Response(pipe.readable, up);
  },
};`;
}

export interface Running {
  name: Name;
  url: string;
  /** What the target needs on each request (kvgate's key). */
  headers: Record<string, string>;
  /** The model its clients ask for (kvgate-restamp's is not the upstream's). */
  model: string;
  pid: number;
  /** Served apart: the workerd of its Durable Objects (pid is then the Worker's). */
  objectPid?: number;
  /** After the warm-up: that the target did what its name says (see overhead's Target.confirm). */
  confirm?: () => Promise<string>;
  stop(): Promise<void>;
}

type Served = Pick<Running, "url" | "headers" | "model" | "confirm" | "stop"> & { pids?: ApartPids };

/** Starts `name`, each in a workerd of its own (two, for an apart target). */
async function serve(name: Name, fleet: string[], baselines: ReadonlyMap<string, string>): Promise<Served> {
  const upstream = fleet[0] as string;
  const worker = (w: ServedWorker): Served => ({ url: w.url, headers: {}, model: SIM_MODEL, stop: () => w.dispose() });
  if (name === "floor") return floorTarget(upstream);
  if (name === "kvgate" || name === "kvgate-restamp" || name === "kvgate-key" || name === "kvgate-nolog") return kvgateTarget(name, fleet);
  if (name === "kvgate-key-nousage") return kvgateTarget("kvgate-key", fleet, { keySettings: BENCH_KEY_NO_USAGE });
  if (name === "kvgate-apart") return kvgateTarget("kvgate-apart", fleet);
  if (name === "floor+body+route" || name === "floor+body+route-apart") return ceilingTarget(upstream, { objectsApart: name === "floor+body+route-apart" });
  if (name.startsWith("kvgate@")) return kvgateTarget("kvgate", fleet, { root: baselines.get(name) as string });
  if (name === "floor-via-entry") return worker(await startFloor(upstream, true));
  if (name === "floor+pipe" || name === "floor+ttft") return worker(await startScriptWorker(floorPipe(upstream, name === "floor+ttft")));
  return worker(await startScriptWorker(floorRoute(upstream), TOY_ROUTER_BINDING));
}

/** Starts `name` and finds the workerd process that serves it. `baselines`: kvgate@<commit> → its checkout. */
export async function startTarget(name: Name, fleet: string[], baselines: ReadonlyMap<string, string>): Promise<Running> {
  const { served, pid } = await servedBy(() => serve(name, fleet, baselines));
  if (pid === null) {
    await served.stop();
    throw new Error(`cannot tell which workerd serves ${name} (this benchmark reads /proc, Linux only)`);
  }
  // Not spread: an overhead Target brings a name of its own (kvgate for a kvgate@ baseline).
  const { url, headers, model, confirm, stop } = served;
  return { name, pid, ...(served.pids ? { objectPid: served.pids.object } : {}), url, headers, model, stop, ...(confirm ? { confirm } : {}) };
}
