/**
 * Issue 14's goals (medians of 3 seeds), checked on every trace and point of a results file:
 * (a) prefix-aware's TTFT p50 and p95 at or below the best of least-loaded, round-robin and every
 *     peer in the same run (versus-best.ts: a 5% allowance only where that baseline's own seeds
 *     spread more);
 * (b) kv_hit ≥ 0.97 × the ceiling wherever the working set exceeds one worker's cache;
 * (c) on the Mooncake conversation slice at ≥ 80% load, TTFT p95 ≤ 0.5 × round-robin's and
 *     ≤ 0.8 × least-loaded's;
 * (d) no backend above 1.5 × the mean share of requests on any trace.
 */
import { aggregate, atLeastMark, axis, key, median, type Cell } from "./aggregate.ts";
import { aggregateOpenLoop, OPEN_LOOP_SESSIONS } from "./open-loop-aggregate.ts";
import { OPEN_LOOP_REGIME } from "./open-loop-matrix.ts";
import type { TraceComparisons } from "./p95-split.ts";
import type { RoutingResults } from "./types.ts";
import { baselinesIn, comparisonMark, overLimit, versusBest, worstOf, type Comparison } from "./versus-best.ts";
import { boundedRatioMark } from "../stats/quantiles.ts";

export interface Check {
  goal: string;
  ok: boolean;
  detail: string;
}

export const KV_OF_CEILING = 0.97;
export const MOONCAKE_MIN_LOAD = 0.8;
export const VERSUS_ROUND_ROBIN = 0.5;
export const VERSUS_LEAST_LOADED = 0.8;
export const SHARE_OVER_MEAN = 1.5;
const PA = "prefix-aware";
/** The fleet's size where results that predate recording it do not say (every run so far was of 4). */
const DEFAULT_WORKERS = 4;

/** A trace of one regime (or the open-loop traces), with its points and the strategies that ran. */
interface TraceGroup {
  regime: string;
  trace: string;
  sessions: number[];
  strategies: string[];
  /** The fleet's size in its runs, as the results record it (the regime's, the open-loop setup's). */
  workers: number;
}

const f3 = (x: number | null | undefined) => (x === null || x === undefined ? "–" : x.toFixed(3));
const name = (g: Pick<TraceGroup, "regime" | "trace">) => `${g.regime} ${g.trace}`;
const at = (sessions: number) => (sessions === OPEN_LOOP_SESSIONS ? "" : ` at ${sessions} sessions`);
const pointName = (regime: string, trace: string, sessions: number) => `${regime} ${trace}${sessions === OPEN_LOOP_SESSIONS ? "" : ` ${sessions}`}`;

function groupsOf(results: RoutingResults): TraceGroup[] {
  const out: TraceGroup[] = [];
  for (const regime of axis(results.runs, (r) => r.regime)) {
    for (const trace of axis(results.runs.filter((r) => r.regime === regime), (r) => r.trace)) {
      const here = results.runs.filter((r) => r.regime === regime && r.trace === trace);
      const workers = results.regimes.find((r) => r.name === regime)?.workers ?? DEFAULT_WORKERS;
      out.push({ regime, trace, sessions: axis(here, (r) => r.sessions).sort((a, b) => a - b), strategies: axis(here, (r) => r.strategy), workers });
    }
  }
  const open = results.open_loop_runs ?? [];
  for (const trace of axis(open, (r) => r.trace)) {
    const workers = results.open_loop_setups?.find((s) => s.trace === trace)?.workers ?? DEFAULT_WORKERS;
    out.push({ regime: OPEN_LOOP_REGIME, trace, sessions: [OPEN_LOOP_SESSIONS], strategies: axis(open.filter((r) => r.trace === trace), (r) => r.strategy), workers });
  }
  return out;
}

/** Every cell of the results, closed-loop and open-loop, in one map. */
export function allCells(results: RoutingResults): Map<string, Cell> {
  return new Map<string, Cell>([...aggregate(results), ...aggregateOpenLoop(results.open_loop_runs ?? [])]);
}

function describe(c: Comparison | undefined): string {
  if (!c) return "";
  const allowance = c.limit > 1 ? `its seeds ×${c.spread.toFixed(2)}, so a 5% allowance` : `its seeds ×${c.spread.toFixed(2)}, no allowance`;
  return `${c.metric} ${comparisonMark(c)}${c.ratio.toFixed(3)} × ${c.baseline}${at(c.sessions)} (${allowance})`;
}

/** Each concurrency's two ratios, the ones over their limit in bold. */
function eachPoint(compared: Comparison[]): string {
  const ratio = (c: Comparison | undefined) => {
    if (!c) return "–";
    const shown = `${comparisonMark(c)}${c.ratio.toFixed(2)}`;
    return overLimit(c) ? `**${shown}**` : shown;
  };
  return axis(compared, (c) => c.sessions)
    .map((n) => `${n} ${ratio(compared.find((c) => c.sessions === n && c.metric === "p50"))} · ${ratio(compared.find((c) => c.sessions === n && c.metric === "p95"))}`)
    .join(", ");
}

/** (a)'s comparisons of one trace: prefix-aware against the best of the baselines that ran there. */
function comparisonsOf(g: TraceGroup, cells: Map<string, Cell>): TraceComparisons {
  const baselines = baselinesIn(g.strategies.map((strategy) => ({ strategy }))).filter((b) => g.strategies.includes(b));
  return { regime: g.regime, trace: g.trace, baselines, compared: versusBest(cells, g.regime, g.trace, g.sessions, baselines) };
}

/** (a)'s comparisons of every closed-loop trace, for the report's split of the p95s over the best (p95-split.ts). */
export function closedLoopComparisons(results: RoutingResults, cells: Map<string, Cell> = allCells(results)): TraceComparisons[] {
  return groupsOf(results)
    .filter((g) => g.regime !== OPEN_LOOP_REGIME)
    .map((g) => comparisonsOf(g, cells));
}

/** (a), one row per trace, then one row saying where it fails over the whole run. */
function versusBestChecks(groups: TraceGroup[], cells: Map<string, Cell>): Check[] {
  const out: Check[] = [];
  const failing: string[] = [];
  let points = 0;
  for (const g of groups) {
    const { baselines, compared } = comparisonsOf(g, cells);
    if (compared.length === 0) continue;
    const over = compared.filter(overLimit);
    const where = axis(over, (c) => c.sessions);
    points += axis(compared, (c) => c.sessions).length;
    failing.push(...where.map((n) => pointName(g.regime, g.trace, n)));
    const worst = `worst ${describe(worstOf(compared, "p50"))}, ${describe(worstOf(compared, "p95"))}`;
    const open = g.regime === OPEN_LOOP_REGIME;
    const missed = where.length === 0 || open ? "" : `over at ${where.join(", ")} sessions; `;
    out.push({
      goal: `(a) ${name(g)}: prefix-aware TTFT p50 and p95 ≤ the best of ${baselines.join(", ")}${open ? "" : " at every concurrency"}`,
      ok: over.length === 0,
      detail: `${missed}${worst}${open ? "" : `; each point, p50 · p95 over the best (bold: over its limit): ${eachPoint(compared)}`}`,
    });
  }
  if (points > 0) {
    out.push({
      goal: "(a) where prefix-aware's TTFT p50 or p95 is above the best baseline",
      ok: failing.length === 0,
      detail: failing.length === 0 ? `nowhere: at or below it at all ${points} points` : `${failing.length} of ${points} points: ${failing.join("; ")}`,
    });
  }
  return out;
}

interface KvPoint {
  sessions: number;
  workingSet: number;
  capacity: number;
  /** Median over seeds of prefix-aware's kv_hit over that seed's ceiling. */
  ofCeiling: number | null;
  kvHit: number | null;
  ceiling: number | null;
}

/** (b)'s points of a trace: each with its working set against one worker's cache. */
function kvPoints(results: RoutingResults, g: TraceGroup): KvPoint[] {
  if (g.regime === OPEN_LOOP_REGIME) {
    const runs = (results.open_loop_runs ?? []).filter((r) => r.trace === g.trace && r.strategy === PA);
    const setup = results.open_loop_setups?.find((s) => s.trace === g.trace);
    if (runs.length === 0 || !setup) return [];
    return [
      {
        sessions: OPEN_LOOP_SESSIONS,
        workingSet: median(runs.map((r) => r.working_set_tokens)) ?? 0,
        capacity: setup.kv_capacity_tokens_per_worker,
        ofCeiling: median(runs.map((r) => r.kv_hit_of_ceiling)),
        kvHit: median(runs.map((r) => r.kv_hit)),
        ceiling: median(runs.map((r) => r.kv_ceiling)),
      },
    ];
  }
  const capacity = results.regimes.find((r) => r.name === g.regime)?.kv_capacity_tokens_per_worker;
  if (capacity === undefined) return [];
  const out: KvPoint[] = [];
  for (const n of g.sessions) {
    const footprint = results.footprints.find((x) => x.regime === g.regime && x.trace === g.trace && x.sessions === n);
    const runs = results.runs.filter((r) => r.regime === g.regime && r.trace === g.trace && r.sessions === n && r.strategy === PA);
    if (!footprint || runs.length === 0) continue;
    const ceilingOf = (seed: number) => results.ceilings.find((c) => c.regime === g.regime && c.trace === g.trace && c.sessions === n && c.seed === seed)?.kv_hit ?? null;
    const ratios = runs.map((r) => {
      const c = ceilingOf(r.seed);
      return r.kv_hit === null || c === null || c <= 0 ? null : r.kv_hit / c;
    });
    out.push({
      sessions: n,
      workingSet: footprint.working_set_tokens,
      capacity,
      ofCeiling: median(ratios),
      kvHit: median(runs.map((r) => r.kv_hit)),
      ceiling: median(runs.map((r) => ceilingOf(r.seed))),
    });
  }
  return out;
}

const k = (tokens: number) => `${Math.round(tokens / 1000).toLocaleString("en")}k`;

/** (b), one row per trace with a point whose working set exceeds one worker's cache, then the points that do not qualify. */
function kvChecks(results: RoutingResults, groups: TraceGroup[]): Check[] {
  const out: Check[] = [];
  const notQualified: string[] = [];
  for (const g of groups) {
    const all = kvPoints(results, g);
    const qualify = all.filter((p) => p.workingSet > p.capacity);
    const rest = all.filter((p) => p.workingSet <= p.capacity);
    if (rest.length > 0) notQualified.push(`${name(g)}${g.regime === OPEN_LOOP_REGIME ? "" : ` ${rest.map((p) => p.sessions).join(", ")}`} (${rest.map((p) => k(p.workingSet)).join(", ")} ≤ ${k(rest[0]?.capacity ?? 0)})`);
    if (qualify.length === 0) continue;
    // A ceiling of 0 (nothing in the trace is reused) asks for nothing: 0 ≥ 0.97 × 0.
    const met = (p: KvPoint) => p.ceiling !== null && (p.ceiling <= 0 || (p.ofCeiling !== null && p.ofCeiling >= KV_OF_CEILING));
    const scored = qualify.filter((p) => p.ceiling === null || p.ceiling > 0);
    let worst = (scored[0] ?? qualify[0]) as KvPoint;
    for (const p of scored) if ((p.ofCeiling ?? -1) < (worst.ofCeiling ?? -1)) worst = p;
    const points = g.regime === OPEN_LOOP_REGIME ? `working set ${k(worst.workingSet)} tokens` : `${qualify.map((p) => p.sessions).join(", ")} sessions (${qualify.map((p) => k(p.workingSet)).join(", ")} tokens)`;
    out.push({
      goal: `(b) ${name(g)}: prefix-aware kv_hit ≥ ${KV_OF_CEILING} × the ceiling where the working set exceeds one worker's cache (${k(worst.capacity)} tokens): ${points}`,
      ok: qualify.every(met),
      detail:
        scored.length === 0
          ? "the ceiling is 0: the trace reuses nothing"
          : `lowest ${f3(worst.ofCeiling)} × the ceiling${at(worst.sessions)} (kv_hit ${f3(worst.kvHit)}, ceiling ${f3(worst.ceiling)})${scored.length > 1 ? `; each point: ${scored.map((p) => `${p.sessions} ${f3(p.ofCeiling)}`).join(", ")}` : ""}`,
    });
  }
  if (notQualified.length > 0) {
    out.push({ goal: "(b) points where the working set fits one worker's cache (no kv_hit goal)", ok: true, detail: notQualified.join("; ") });
  }
  return out;
}

/** (c): the Mooncake conversation slice, when it ran at ≥ 80% load. */
function mooncakeChecks(results: RoutingResults, cells: Map<string, Cell>): Check[] {
  const runs = (results.open_loop_runs ?? []).filter((r) => r.trace === "mooncake");
  if (runs.length === 0) return [];
  const load = median(runs.map((r) => r.load.target ?? r.load.at_ceiling));
  const cell = (strategy: string) => cells.get(key(OPEN_LOOP_REGIME, "mooncake", OPEN_LOOP_SESSIONS, strategy));
  const pa = cell(PA)?.p95 ?? null;
  // A lower bound of prefix-aware's p95 cannot show it under a limit.
  const paAtLeast = cell(PA)?.at_least?.includes("p95") ?? false;
  const out: Check[] = [];
  for (const [baseline, limit] of [
    ["round-robin", VERSUS_ROUND_ROBIN],
    ["least-loaded", VERSUS_LEAST_LOADED],
  ] as const) {
    const other = cell(baseline)?.p95 ?? null;
    const ratio = pa === null || other === null || other <= 0 ? null : pa / other;
    const loaded = load !== null && load >= MOONCAKE_MIN_LOAD;
    out.push({
      goal: `(c) open-loop mooncake at ≥ ${MOONCAKE_MIN_LOAD * 100}% load: prefix-aware TTFT p95 ≤ ${limit} × ${baseline}'s`,
      ok: loaded && ratio !== null && ratio <= limit && !paAtLeast,
      detail: `${ratio === null ? "no figure" : `${boundedRatioMark(paAtLeast, cell(baseline)?.at_least?.includes("p95") ?? false)}${ratio.toFixed(3)} (${paAtLeast ? "≥ " : ""}${pa?.toFixed(0)} against ${atLeastMark(cell(baseline) ?? {}, "p95")}${other?.toFixed(0)} ms)`}; load ${load === null ? "–" : load.toFixed(2)}${loaded ? "" : ", under the goal's load"}`,
    });
  }
  return out;
}

/** (d): prefix-aware's largest backend share on each trace, over its points. */
function shareChecks(groups: TraceGroup[], cells: Map<string, Cell>): Check[] {
  const out: Check[] = [];
  for (const g of groups) {
    const limit = SHARE_OVER_MEAN / g.workers;
    let worst: { sessions: number; share: number } | undefined;
    for (const n of g.sessions) {
      const share = cells.get(key(g.regime, g.trace, n, PA))?.max_share ?? null;
      if (share !== null && (!worst || share > worst.share)) worst = { sessions: n, share };
    }
    if (!worst) continue;
    out.push({
      goal: `(d) ${name(g)}: no backend above ${SHARE_OVER_MEAN} × the mean share (${limit.toFixed(3)} of ${g.workers})`,
      ok: worst.share <= limit,
      detail: `prefix-aware's largest ${worst.share.toFixed(3)}${at(worst.sessions)}`,
    });
  }
  return out;
}

export function evaluateGoals(results: RoutingResults): Check[] {
  const cells = allCells(results);
  const groups = groupsOf(results);
  return [...versusBestChecks(groups, cells), ...kvChecks(results, groups), ...mooncakeChecks(results, cells), ...shareChecks(groups, cells)];
}
