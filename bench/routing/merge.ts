/**
 * `--merge`: a run of part of the matrix replaces, in the results already written, the runs of the
 * points it makes and keeps every other one. The whole sweep takes longer than one sitting on a
 * shared machine; made in parts, each run keeps the commit and time it was made at, and every
 * comparison the report draws is within one point, whose routers always run together.
 */
import type { OpenLoopRoutingRun, RoutingResults, RoutingRun } from "./types.ts";

/** What names a run within the matrix: a closed-loop run's point, or an open-loop run's (sessions 0). */
export interface RunKey {
  regime: string;
  trace: string;
  strategy: string;
  sessions: number;
  seed: number;
}

export const runKey = (r: RunKey): string => `${r.regime}|${r.trace}|${r.sessions}|${r.seed}|${r.strategy}`;

/** Why `prior` cannot take this run's results beside its own, or null when it can. */
export function mergeConflict(prior: RoutingResults, fresh: RoutingResults): string | null {
  if (prior.quick !== fresh.quick) return `the results there are ${prior.quick ? "--quick" : "full"} ones and this run is ${fresh.quick ? "--quick" : "full"}`;
  if (JSON.stringify(prior.regimes) !== JSON.stringify(fresh.regimes)) return "the results there were made with other regimes (bench/routing/matrix.ts changed)";
  if (JSON.stringify(prior.open_loop_setups ?? []) !== JSON.stringify(fresh.open_loop_setups ?? [])) return "the results there were made with other open-loop setups (bench/routing/open-loop-matrix.ts changed)";
  if ((prior.warm_up_requests ?? 0) !== (fresh.warm_up_requests ?? 0)) return "the results there were made with another warm-up";
  // One report states one TTFT rule for every run, and a goal compares runs of one point: a part
  // counting timeouts beside runs that left them out would compare the two rules as if one.
  if ((prior.ttft_rule ?? null) !== (fresh.ttft_rule ?? null)) return `the results there count TTFT ${prior.ttft_rule === undefined ? "without the requests that timed out (they predate counting them)" : "by another rule"}: make the whole sweep again (--out to a new folder, then move it), not a part`;
  return null;
}

/**
 * This run's results, starting from `prior`'s: the runs (and error samples) of every point `planned`
 * names are dropped, to be made again; ceilings, peers and the parts so far are kept.
 */
export function mergeBase(prior: RoutingResults, fresh: RoutingResults, planned: ReadonlySet<string>): RoutingResults {
  const keep = (r: RunKey) => !planned.has(runKey(r));
  const peers = new Map((prior.peers ?? []).map((p) => [p.name, p]));
  for (const p of fresh.peers ?? []) peers.set(p.name, p);
  return {
    ...fresh,
    ceilings: prior.ceilings,
    error_samples: prior.error_samples.filter(keep),
    peers: [...peers.values()],
    runs: prior.runs.filter(keep),
    open_loop_runs: (prior.open_loop_runs ?? []).filter((r) => keep({ ...r, sessions: 0 })),
    parts: [...(prior.parts ?? [{ command: prior.command, date: prior.date, commit: null }]), ...(fresh.parts ?? [])],
  };
}

/** The commits the runs were made at, and how many runs each: one entry for results made in one go. */
export function commitsOf(runs: readonly (RoutingRun | OpenLoopRoutingRun)[]): { commit: string; runs: number }[] {
  const counts = new Map<string, number>();
  for (const r of runs) counts.set(r.commit ?? "unrecorded", (counts.get(r.commit ?? "unrecorded") ?? 0) + 1);
  return [...counts].map(([commit, n]) => ({ commit, runs: n }));
}

/**
 * Points (a run's key less its router and seed) whose runs were made by more than one part: a
 * run's part is the last whose start is not after the run (a run without a time, the first).
 */
export function mixedPoints(runs: readonly (RoutingRun | OpenLoopRoutingRun)[], parts: readonly { date: string }[]): number {
  const starts = parts.map((p) => Date.parse(p.date));
  const partOf = (at: string | undefined): number => {
    if (at === undefined) return 0;
    const t = Date.parse(at);
    let part = 0;
    for (let i = 0; i < starts.length; i++) if ((starts[i] as number) <= t) part = i;
    return part;
  };
  const made = new Map<string, Set<number>>();
  for (const r of runs) {
    // A point is its regime, trace and sessions: its comparisons are medians over its seeds.
    const point = runKey({ ...r, strategy: "", seed: 0, sessions: "sessions" in r ? r.sessions : 0 });
    let set = made.get(point);
    if (!set) made.set(point, (set = new Set()));
    set.add(partOf(r.at));
  }
  let mixed = 0;
  for (const set of made.values()) if (set.size > 1) mixed++;
  return mixed;
}
