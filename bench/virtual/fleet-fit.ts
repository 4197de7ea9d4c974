import type { OpenLoopRoutingRun, RoutingRun } from "../routing/types.ts";
import { mean, median } from "../stats/quantiles.ts";
import type { VirtualRun } from "./point.ts";
import { pooled } from "./stats.ts";
import { groupBy, key as pointKey } from "../routing/aggregate.ts";

/**
 * How far the runs in virtual time land from the same traffic on the fleet (bench:routing's
 * committed runs), per router and figure. The harness leaves out what the fleet's runs add —
 * workerd, the sockets, a client, a gateway and four engines sharing 2 cores — and stands in for
 * it with each request's body read and its hops, draws of 0 to `pre_route_hop_ms` before routing
 * and 0 to `hop_ms` after: this is what says which bounds stand in best. Too short a hop keeps closed-loop sessions in a lockstep the fleet does not have: at hops
 * of 0–2 ms least-loaded's TTFT p50 was 0.93 × the fleet's at the median point and 15% off it on
 * average (both regimes' 45 points); at 0–10 ms 0.99 × and 4.3%.
 */
export interface FleetFit {
  /** A closed-loop regime's points together, or "open-loop" with its `trace`. */
  regime: string;
  trace?: string;
  strategy: string;
  figure: FitFigure;
  /** Closed loop: points run both here and on the fleet; open loop: seeds (slices) of the trace. */
  points: number;
  /** The median point's figure here ÷ the fleet's: under 1, lower here. */
  ratio: number;
  /** The mean of |ln(here ÷ there)| over the points: how far a point lands, either way. */
  miss: number;
}

export type FitFigure = "kv_hit" | "p50" | "p95";

const TTFT_FIGURES = ["p50", "p95"] as const;
const OPEN_LOOP_FIGURES = ["kv_hit", "p50", "p95"] as const;

/** Each group's ln(here ÷ there) per point, kept with what names the group. */
class Misses {
  private readonly groups = new Map<string, { row: Omit<FleetFit, "points" | "ratio" | "miss">; logs: number[] }>();

  add(row: Omit<FleetFit, "points" | "ratio" | "miss">, here: number, there: number | null): void {
    if (!(here > 0) || there === null || !(there > 0)) return;
    const key = `${row.regime} ${row.trace ?? ""} ${row.strategy} ${row.figure}`;
    let g = this.groups.get(key);
    if (!g) this.groups.set(key, (g = { row, logs: [] }));
    g.logs.push(Math.log(here / there));
  }

  fits(): FleetFit[] {
    return [...this.groups.values()].map(({ row, logs }) => ({ ...row, points: logs.length, ratio: Math.exp(median(logs) as number), miss: mean(logs.map(Math.abs)) }));
  }
}

/**
 * The closed-loop points: each point's figure here (the mean over a seed's draws, then over the
 * seeds, as the report gives it) against the fleet's (the median over its seeds, as routing.md
 * gives it), for every regime and router run in both.
 */
export function fleetFit(runs: readonly VirtualRun[], fleet: readonly Pick<RoutingRun, "regime" | "trace" | "sessions" | "strategy" | "ttft_ms">[]): FleetFit[] {
  const fleetAt = groupBy(fleet, (r) => pointKey(r.regime, r.trace, r.sessions, r.strategy));
  const virtualAt = groupBy(
    runs.filter((r) => r.regime !== undefined && r.sessions !== undefined),
    (r) => pointKey(r.regime as string, r.trace, r.sessions as number, r.strategy),
  );
  const misses = new Misses();
  for (const [k, rs] of virtualAt) {
    const on = fleetAt.get(k);
    if (!on) continue;
    const { regime, strategy } = rs[0] as VirtualRun;
    for (const figure of TTFT_FIGURES) {
      misses.add({ regime: regime as string, strategy, figure }, pooled(rs, (r) => r.ttft_ms[figure]), median(on.map((r) => r.ttft_ms[figure] ?? NaN).filter(Number.isFinite)));
    }
  }
  return misses.fits();
}

/**
 * The open-loop traces: each seed (a Mooncake slice, a b2b-saas draw of arrivals) here, the mean
 * over its draws, against the fleet's run of the same seed, for kv_hit and TTFT p50 and p95.
 */
export function openLoopFleetFit(runs: readonly VirtualRun[], fleet: readonly Pick<OpenLoopRoutingRun, "trace" | "seed" | "strategy" | "kv_hit" | "ttft_ms">[]): FleetFit[] {
  const fleetAt = new Map(fleet.map((r) => [`${r.trace} ${r.seed} ${r.strategy}`, r]));
  const virtualAt = groupBy(
    runs.filter((r) => r.regime === undefined),
    (r) => `${r.trace} ${r.seed} ${r.strategy}`,
  );
  const misses = new Misses();
  for (const [k, rs] of virtualAt) {
    const on = fleetAt.get(k);
    if (!on) continue;
    const { trace, strategy } = rs[0] as VirtualRun;
    for (const figure of OPEN_LOOP_FIGURES) {
      const of = (r: { kv_hit: number | null; ttft_ms: VirtualRun["ttft_ms"] }) => (figure === "kv_hit" ? r.kv_hit : r.ttft_ms[figure]);
      misses.add({ regime: "open-loop", trace, strategy, figure }, pooled(rs, of), of(on));
    }
  }
  return misses.fits();
}
