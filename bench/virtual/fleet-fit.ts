import type { RoutingRun } from "../routing/types.ts";
import { mean, median } from "../stats/quantiles.ts";
import type { VirtualRun } from "./point.ts";
import { pooled } from "./stats.ts";

/**
 * How far the closed-loop points in virtual time land from the same points on the fleet
 * (bench:routing's committed runs), per regime, router and TTFT figure. The harness leaves out
 * what the fleet's runs add — workerd, the sockets, a client, a gateway and four engines sharing
 * 2 cores — and stands in for it with each request's hop, a draw of 0 to `hop_ms`: this is what
 * says which bound stands in best. Too short a hop keeps closed-loop sessions in a lockstep the
 * fleet does not have: at hops of 0–2 ms least-loaded's TTFT p50 was 0.93 × the fleet's at the
 * median point and 16% off it on average; at 0–10 ms 0.99 × and 4.3%.
 */
export interface FleetFit {
  regime: string;
  strategy: string;
  figure: "p50" | "p95";
  /** Points run both here and on the fleet. */
  points: number;
  /** The median point's virtual figure ÷ the fleet's: under 1, virtual time is the faster. */
  ratio: number;
  /** The mean of |ln(virtual ÷ fleet)| over the points: how far a point lands, either way. */
  miss: number;
}

const FIGURES = ["p50", "p95"] as const;

/**
 * Each point's virtual figure (the mean over a seed's draws, then over the seeds, as the report
 * gives it) against the fleet's (the median over its seeds, as routing.md gives it), for every
 * regime and router run in both.
 */
export function fleetFit(runs: readonly VirtualRun[], fleet: readonly RoutingRun[]): FleetFit[] {
  const fleetAt = new Map<string, RoutingRun[]>();
  for (const r of fleet) {
    const k = pointKey(r.regime, r.trace, r.sessions, r.strategy);
    const at = fleetAt.get(k);
    if (at) at.push(r);
    else fleetAt.set(k, [r]);
  }
  const virtualAt = new Map<string, VirtualRun[]>();
  for (const r of runs) {
    if (r.regime === undefined || r.sessions === undefined) continue;
    const k = pointKey(r.regime, r.trace, r.sessions, r.strategy);
    const at = virtualAt.get(k);
    if (at) at.push(r);
    else virtualAt.set(k, [r]);
  }
  const logs = new Map<string, { regime: string; strategy: string; figure: (typeof FIGURES)[number]; values: number[] }>();
  for (const [k, rs] of virtualAt) {
    const on = fleetAt.get(k);
    if (!on) continue;
    const { regime, strategy } = rs[0] as VirtualRun;
    for (const figure of FIGURES) {
      const here = pooled(rs, (r) => r.ttft_ms[figure]);
      const there = median(on.map((r) => r.ttft_ms[figure] ?? NaN).filter(Number.isFinite));
      if (!(here > 0) || there === null || !(there > 0)) continue;
      const g = `${regime} ${strategy} ${figure}`;
      let row = logs.get(g);
      if (!row) logs.set(g, (row = { regime: regime as string, strategy, figure, values: [] }));
      row.values.push(Math.log(here / there));
    }
  }
  return [...logs.values()].map(({ regime, strategy, figure, values }) => ({
    regime,
    strategy,
    figure,
    points: values.length,
    ratio: Math.exp(median(values) as number),
    miss: mean(values.map(Math.abs)),
  }));
}

const pointKey = (regime: string, trace: string, sessions: number, strategy: string) => `${regime} ${trace} ${sessions} ${strategy}`;
