import { GroupRouter } from "../../src/routing/group-router.ts";
import { groupShards } from "../../src/sharding/partition.ts";
import { ShardChoice } from "../../src/sharding/shard-choice.ts";
import { medianBy } from "../stats/quantiles.ts";
import { mulberry32 } from "../traces/prng.ts";
import { conversations, group, IN_FLIGHT_PER_BACKEND } from "./workload.ts";

/** One group over `shards` objects, on the route-object benchmark's conversations. */
export interface ShardRun {
  backends: number;
  chain_blocks: number;
  shards: number;
  /** The objects' time per route call (its release included), over all shards. */
  us_per_route: number;
  /** Route calls per second the group takes with its objects running side by side: calls over the busiest object's time. */
  routes_per_sec: number;
  /** Range of routes_per_sec over the repeats. */
  routes_per_sec_min: number;
  routes_per_sec_max: number;
  /** The busiest object's share of the calls, times the number of shards: 1 is an even split. */
  busiest_load: number;
  /** The Worker's side: choosing the shard (keying the prompt, ordering the shards), then noting the object's answer and where the prompt went, µs per call. */
  worker_us_per_route: number;
  /** Prompt blocks the chosen backend's prefix set held, over all blocks routed: sharding must keep it. */
  matched_share: number;
  calls_per_repeat: number;
}

/** One repeat's figures of one point. */
export interface Repeat {
  usPerRoute: number;
  routesPerSec: number;
  busiestLoad: number;
  workerUs: number;
  matchedShare: number;
}

/**
 * Routes `calls` prompts of the benchmark's conversations through a group of `backends` split
 * over `shards` objects, as the gateway does: the Worker's ShardChoice picks the shard (with the
 * in-flight counts the objects answer, and the leases it ends), the shard's router routes, and a
 * call beyond 8 in flight per backend releases the oldest lease on its own shard. Each object's
 * calls are timed one by one (wall clock, high resolution, on a quiet core: an object's calls
 * are its CPU), so its busy time is known; the objects of a sharded group run side by side in
 * production (each is its own single thread), so the group's rate is bounded by the busiest one.
 * A warm-up of `calls` first fills the prefix sets.
 */
function routeThrough(backends: number, chainBlocks: number, shards: number, calls: number): Repeat {
  const g = group(backends, shards);
  const split = groupShards(g);
  const routers = split.views.map((view) => {
    const r = new GroupRouter("g", mulberry32(7).next);
    r.install(view, 0);
    return r;
  });
  const choice = new ShardChoice();
  const next = conversations(backends, chainBlocks);
  const inFlight: { shard: number; lease: string }[] = [];
  const busy = new Float64Array(shards);
  const count = new Float64Array(shards);
  let workerMs = 0;
  let matched = 0;
  let blocks = 0;
  let now = 0;
  const call = (timed: boolean): void => {
    now++;
    // A fresh array per request, as the Worker's fingerprint makes one.
    const chain = next().slice();
    const t0 = performance.now();
    // One shard: the gateway routes as it always did, with no key computed (route-client.ts).
    const plan = shards === 1 ? null : choice.order(g, chain);
    const s = plan ? (plan.order[0] as number) : 0;
    const t1 = performance.now();
    const object = split.objectNames[s] as string;
    choice.sent(object);
    const d = (routers[s] as GroupRouter).route(g.version, chain, [], now);
    const t2 = performance.now();
    if ("refused" in d) throw new Error(`shard ${s} refused: ${d.refused}`);
    // Told where the prompt went, as route-client.ts tells it: the Worker's side too.
    choice.answered(object, d);
    if (plan) choice.placed(g, plan, s);
    const t2b = performance.now();
    inFlight.push({ shard: s, lease: d.lease });
    let released = 0;
    if (inFlight.length > backends * IN_FLIGHT_PER_BACKEND) {
      const old = inFlight.shift() as { shard: number; lease: string };
      const t3 = performance.now();
      (routers[old.shard] as GroupRouter).release({ lease: old.lease, outcome: "ok", ttftMs: 40, durationMs: 400 }, now);
      released = performance.now() - t3;
      choice.ended(split.objectNames[old.shard] as string);
      if (timed) busy[old.shard] = (busy[old.shard] as number) + released;
    }
    if (!timed) return;
    busy[s] = (busy[s] as number) + (t2 - t1);
    count[s] = (count[s] as number) + 1;
    workerMs += t1 - t0 + (t2b - t2);
    matched += d.matched;
    blocks += d.total;
  };
  for (let i = 0; i < calls; i++) call(false);
  for (let i = 0; i < calls; i++) call(true);
  const totalMs = busy.reduce((a, b) => a + b, 0);
  return {
    usPerRoute: (totalMs * 1000) / calls,
    routesPerSec: calls / (Math.max(...busy) / 1000),
    busiestLoad: (Math.max(...count) / calls) * shards,
    workerUs: (workerMs * 1000) / calls,
    matchedShare: matched / blocks,
  };
}

/** Each point's repeats taken in turn over all the points; the median repeat by rate, with the range. */
export function shardRuns(points: readonly { backends: number; chainBlocks: number; shards: number }[], calls: number, repeats: number, progress: (line: string) => void): ShardRun[] {
  const got = points.map(() => [] as Repeat[]);
  for (let r = 0; r < repeats; r++) {
    points.forEach((p, i) => (got[i] as Repeat[]).push(routeThrough(p.backends, p.chainBlocks, p.shards, calls)));
    progress(`shards: repeat ${r + 1}/${repeats}`);
  }
  return points.map((p, i) => shardRun(p, got[i] as Repeat[], calls));
}

/**
 * One point's figures: those of its median repeat by rate (bench/stats/quantiles.ts's rule, the
 * lower middle of an even count), so every figure is of one repeat; the range of the rates beside.
 */
export function shardRun(p: { backends: number; chainBlocks: number; shards: number }, repeats: readonly Repeat[], calls: number): ShardRun {
  const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;
  const rates = repeats.map((r) => r.routesPerSec);
  const mid = medianBy(repeats, (r) => r.routesPerSec);
  return {
    backends: p.backends,
    chain_blocks: p.chainBlocks,
    shards: p.shards,
    us_per_route: round(mid.usPerRoute, 2),
    routes_per_sec: Math.round(mid.routesPerSec),
    routes_per_sec_min: Math.round(Math.min(...rates)),
    routes_per_sec_max: Math.round(Math.max(...rates)),
    busiest_load: round(mid.busiestLoad, 3),
    worker_us_per_route: round(mid.workerUs, 2),
    matched_share: round(mid.matchedShare, 4),
    calls_per_repeat: calls,
  };
}
