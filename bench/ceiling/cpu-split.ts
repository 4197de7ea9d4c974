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
import { byRepeat, combineByRepeat, spread, type CeilingRun, type RunFigure, type Spread } from "./key-cost.ts";
import { APART_OF, type Name } from "./targets.ts";

export const CEILING: Name = "floor+body+route";
export const KVGATE: Name = "kvgate";

export interface SideSplit {
  /** The same-process target whose CPU is split. */
  target: Name;
  /** Its objects-apart twin. */
  apart: Name;
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

const rps: RunFigure = (r) => r.rps;
const objectSide: RunFigure = (r) => r.cpu_split_us_per_request?.object;
const workerSide: RunFigure = (r) => r.cpu_split_us_per_request?.worker;
const minus = (x: number, y: number) => x - y;
const over = (x: number, y: number) => x / y;
const NON_STREAMED = undefined;
const spreadOf = (m: ReadonlyMap<number, number>): Spread => spread([...m.values()]);
const of = (runs: readonly CeilingRun[], target: string, figure?: RunFigure) => byRepeat(runs, target, NON_STREAMED, figure);

/** The Worker's side of `target` per repeat: its one-process CPU less its apart twin's object process. */
const workerByRepeat = (runs: readonly CeilingRun[], target: Name, apart: Name) => combineByRepeat(of(runs, target), of(runs, apart, objectSide), minus);

function side(runs: readonly CeilingRun[], apart: Name, target: Name): SideSplit {
  return {
    target,
    apart,
    object_us: spreadOf(of(runs, apart, objectSide)),
    worker_us: spreadOf(workerByRepeat(runs, target, apart)),
    apart_worker_us: spreadOf(of(runs, apart, workerSide)),
    apart_rps_ratio: spreadOf(combineByRepeat(of(runs, apart, rps), of(runs, target, rps), over)),
  };
}

export function cpuSplit(runs: readonly CeilingRun[]): CpuSplit {
  const has = (t: string) => runs.some((r) => r.target === t && r.chunks === undefined);
  const sides = (Object.entries(APART_OF) as [Name, Name][]).filter(([apart, target]) => has(apart) && has(target)).map(([apart, target]) => side(runs, apart, target));
  let versus: VersusCeiling | null = null;
  if (has(KVGATE) && has(CEILING)) {
    const apartOf = (target: Name) => sides.find((s) => s.target === target)?.apart;
    const mine = apartOf(KVGATE);
    const theirs = apartOf(CEILING);
    versus = {
      rps_ratio: spreadOf(combineByRepeat(of(runs, KVGATE, rps), of(runs, CEILING, rps), over)),
      cpu_ratio: spreadOf(combineByRepeat(of(runs, KVGATE), of(runs, CEILING), over)),
      worker_cpu_ratio: mine && theirs ? spreadOf(combineByRepeat(workerByRepeat(runs, KVGATE, mine), workerByRepeat(runs, CEILING, theirs), over)) : null,
      object_cpu_ratio: mine && theirs ? spreadOf(combineByRepeat(of(runs, mine, objectSide), of(runs, theirs, objectSide), over)) : null,
    };
  }
  return { how: HOW, sides, versus_ceiling: versus };
}
