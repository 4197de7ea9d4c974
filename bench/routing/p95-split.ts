/**
 * Where prefix-aware's TTFT p95 over the best baseline (goal (a)) comes from, told apart from the
 * same run's figures. kvgate's round-robin places as SGLang's round_robin does, so the ratio of
 * their p95s is what kvgate's Worker and routing object add in front of the fleet — the gateway's
 * share; prefix-aware over kvgate's round-robin is the same gateway placing otherwise — the
 * routing's share. The p95 of the turns after each session's first leaves the opening burst out,
 * when every session's first prompt reaches the gateway at once.
 */
import { axis, key, median, type Cell } from "./aggregate.ts";
import { bestBaseline, overLimit, type Comparison } from "./versus-best.ts";

/** The peer that places as kvgate's round-robin does. */
export const PEER_ROUND_ROBIN = "sglang-round_robin";
const KVGATE_ROUND_ROBIN = "round-robin";
const PA = "prefix-aware";

export interface P95Split {
  sessions: number;
  /** kvgate's round-robin's p95 over the peer's round-robin's: the gateway's share (null without the peer). */
  gateway: number | null;
  /** prefix-aware's p95 over kvgate's round-robin's: the routing's share. */
  routing: number | null;
  /** prefix-aware's p95 over the turns after each session's first, over the lowest such p95 of the baselines. */
  laterTurns: { ratio: number; baseline: string } | null;
}

const ratio = (a: number | null | undefined, b: number | null | undefined) => (a === null || a === undefined || b === null || b === undefined || b <= 0 ? null : a / b);

/** The split at each of `sessions` of one closed-loop trace. */
export function p95Splits(cells: Map<string, Cell>, regime: string, trace: string, sessions: readonly number[], baselines: readonly string[]): P95Split[] {
  return sessions.map((n) => {
    const cell = (strategy: string) => cells.get(key(regime, trace, n, strategy));
    const rr = cell(KVGATE_ROUND_ROBIN)?.p95;
    // A baseline with no positive figure is passed over: there is no ratio to it.
    const best = bestBaseline(cells, regime, trace, n, baselines, (c) => (c.later_p95 !== null && c.later_p95 > 0 ? c.later_p95 : null));
    const later = ratio(cell(PA)?.later_p95, best?.value);
    return {
      sessions: n,
      gateway: ratio(rr, cell(PEER_ROUND_ROBIN)?.p95),
      routing: ratio(cell(PA)?.p95, rr),
      laterTurns: later === null || !best ? null : { ratio: later, baseline: best.name },
    };
  });
}

const f2 = (x: number | null) => (x === null ? "–" : x.toFixed(2));

function range(values: readonly number[]): string {
  if (values.length === 0) return "–";
  return `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)} (median ${(median([...values]) as number).toFixed(2)})`;
}

/** A closed-loop trace's comparisons for (a), with the trace's name, as goals.ts makes them. */
export interface TraceComparisons {
  regime: string;
  trace: string;
  compared: Comparison[];
  baselines: string[];
}

/**
 * routing.md's section: over every closed-loop point, the range of each share; then one row per
 * point where prefix-aware's p95 is over its limit. Empty when no compared point has kvgate's
 * round-robin beside prefix-aware: without it neither share can be told.
 */
export function renderP95Split(cells: Map<string, Cell>, traces: readonly TraceComparisons[]): string[] {
  const rows: string[] = [];
  const gateway: number[] = [];
  const routing: number[] = [];
  const later: number[] = [];
  for (const t of traces) {
    const splits = p95Splits(cells, t.regime, t.trace, axis(t.compared, (c) => c.sessions), t.baselines);
    for (const s of splits) {
      if (s.gateway !== null) gateway.push(s.gateway);
      if (s.routing !== null) routing.push(s.routing);
      if (s.laterTurns !== null) later.push(s.laterTurns.ratio);
      const over = t.compared.find((c) => c.sessions === s.sessions && c.metric === "p95" && overLimit(c));
      if (!over) continue;
      const laterText = s.laterTurns === null ? "–" : `${s.laterTurns.ratio.toFixed(2)} × ${s.laterTurns.baseline}`;
      rows.push(`| ${t.regime} ${t.trace} ${s.sessions} | ${over.atLeast ? "≥ " : ""}${over.ratio.toFixed(2)} × ${over.baseline} | ${f2(s.gateway)} | ${f2(s.routing)} | ${laterText} |`);
    }
  }
  if (routing.length === 0) return [];
  return [
    "### Where prefix-aware's p95 is over the best",
    "",
    `kvgate's round-robin places as ${PEER_ROUND_ROBIN} does, so their p95s differ by what kvgate's Worker and routing object add in front of the fleet (the gateway's share); prefix-aware against kvgate's round-robin is the same gateway placing otherwise (the routing's share). The turns after each session's first leave out the opening burst, when every session's first prompt reaches the gateway at once. Over all ${routing.length} closed-loop points, TTFT p95 medians: kvgate round-robin over ${PEER_ROUND_ROBIN} ${range(gateway)}; prefix-aware over kvgate round-robin ${range(routing)}; prefix-aware over the best baseline after each session's first turn ${range(later)}.`,
    "",
    ...(rows.length === 0
      ? ["Prefix-aware's p95 is over its limit at no closed-loop point.", ""]
      : [`| point | prefix-aware's p95 over the best | kvgate round-robin over ${PEER_ROUND_ROBIN} (the gateway's share) | prefix-aware over kvgate round-robin (the routing's share) | after each session's first turn: prefix-aware over the best |`, "| --- | --- | --- | --- | --- |", ...rows, ""]),
  ];
}
