/**
 * Where a routing gateway's CPU goes: its Worker or its Durable Object, and kvgate against the
 * ceiling (floor+body+route), from bench:ceiling's non-streamed runs, paired per repeat.
 *
 * The object's CPU is measured: the `-apart` targets serve the Durable Objects in a workerd of
 * their own, whose CPU per request is the object's alone (its routing work and its side of the
 * RPC). The Worker's is the rest of the same-process target's CPU in the same repeat: total −
 * object. Not the apart target's Worker process, which also runs the dev registry's stub (a
 * local object hop and a socket per call) that production does not have.
 */
import { spread, type CeilingRun, type Spread } from "./key-cost.ts";
import { APART_OF, type Name } from "./targets.ts";

export const CEILING = "floor+body+route";
export const KVGATE = "kvgate";

export interface SideSplit {
  /** The same-process target whose CPU is split. */
  target: string;
  /** Its objects-apart twin. */
  apart: string;
  /** The Durable Objects' process, per request. */
  object_us: Spread;
  /** target − object_us, paired per repeat. */
  worker_us: Spread;
  /** The apart twin's Worker process, stub hop included. */
  apart_worker_us: Spread;
  /** The apart twin's req/s over the same-process target's: what the second process and the stub hop do to throughput. */
  apart_rps_ratio: Spread;
}

export interface VersusCeiling {
  /** kvgate / floor+body+route, req/s, paired per repeat. Goal ≥ 0.9. */
  rps_ratio: Spread;
  /** kvgate / floor+body+route, workerd CPU per request (one process, both sides). Goal ≤ 1.15. */
  cpu_ratio: Spread;
  /** The Worker's side alone (SideSplit.worker_us), kvgate over the ceiling's. */
  worker_cpu_ratio: Spread | null;
  /** The object's side alone, kvgate's routing object over the toy router. */
  object_cpu_ratio: Spread | null;
}

export interface CpuSplit {
  how: string;
  sides: SideSplit[];
  versus_ceiling: VersusCeiling | null;
}

const HOW =
  "Non-streamed, c=50, each repeat measuring every target in turn. The -apart targets serve the Worker in one workerd and its Durable Objects in another " +
  "(Miniflare's dev registry binds them across processes); the objects' process CPU per completed request is the object's side. The Worker's side is the " +
  "same-process target's CPU minus that, paired per repeat; the apart Worker process itself is shown but pays a stub hop production does not have.";

type Field = (r: CeilingRun) => number | undefined;
const byRepeat = (runs: readonly CeilingRun[], target: string, field: Field): Map<number, number> => {
  const out = new Map<number, number>();
  for (const r of runs) {
    const v = r.target === target && r.chunks === undefined ? field(r) : undefined;
    if (v !== undefined) out.set(r.repeat, v);
  }
  return out;
};

/** f(a's field, b's field) for every repeat in which both were measured. */
function paired(runs: readonly CeilingRun[], a: [string, Field], b: [string, Field], f: (x: number, y: number) => number): Spread {
  const ys = byRepeat(runs, b[0], b[1]);
  const out: number[] = [];
  for (const [repeat, x] of byRepeat(runs, a[0], a[1])) {
    const y = ys.get(repeat);
    if (y !== undefined) out.push(f(x, y));
  }
  return spread(out);
}

const cpu: Field = (r) => r.cpu_us_per_request;
const rps: Field = (r) => r.rps;
const objectSide: Field = (r) => r.cpu_split_us_per_request?.object;
const workerSide: Field = (r) => r.cpu_split_us_per_request?.worker;
const minus = (x: number, y: number) => x - y;
const over = (x: number, y: number) => x / y;

function side(runs: readonly CeilingRun[], apart: Name, target: Name): SideSplit {
  return {
    target,
    apart,
    object_us: paired(runs, [apart, objectSide], [apart, objectSide], (x) => x),
    worker_us: paired(runs, [target, cpu], [apart, objectSide], minus),
    apart_worker_us: paired(runs, [apart, workerSide], [apart, workerSide], (x) => x),
    apart_rps_ratio: paired(runs, [apart, rps], [target, rps], over),
  };
}

export function cpuSplit(runs: readonly CeilingRun[]): CpuSplit {
  const has = (t: string) => runs.some((r) => r.target === t && r.chunks === undefined);
  const sides = (Object.entries(APART_OF) as [Name, Name][]).filter(([apart, target]) => has(apart) && has(target)).map(([apart, target]) => side(runs, apart, target));
  let versus: VersusCeiling | null = null;
  if (has(KVGATE) && has(CEILING)) {
    const mine = sides.find((s) => s.target === KVGATE);
    const theirs = sides.find((s) => s.target === CEILING);
    // Each side's Worker CPU per repeat: total − object, as in SideSplit.worker_us.
    const workerOf = (s: SideSplit): Map<number, number> => {
      const objects = byRepeat(runs, s.apart, objectSide);
      const out = new Map<number, number>();
      for (const [repeat, total] of byRepeat(runs, s.target, cpu)) {
        const o = objects.get(repeat);
        if (o !== undefined) out.set(repeat, total - o);
      }
      return out;
    };
    const ratioOf = (a: Map<number, number>, b: Map<number, number>): Spread => spread([...a].flatMap(([k, x]) => (b.has(k) ? [x / (b.get(k) as number)] : [])));
    versus = {
      rps_ratio: paired(runs, [KVGATE, rps], [CEILING, rps], over),
      cpu_ratio: paired(runs, [KVGATE, cpu], [CEILING, cpu], over),
      worker_cpu_ratio: mine && theirs ? ratioOf(workerOf(mine), workerOf(theirs)) : null,
      object_cpu_ratio: mine && theirs ? paired(runs, [mine.apart, objectSide], [theirs.apart, objectSide], over) : null,
    };
  }
  return { how: HOW, sides, versus_ceiling: versus };
}
