import { atLeastMark, axis, strategiesIn } from "./aggregate.ts";
import { aggregateOpenLoop, openLoopKey } from "./open-loop-aggregate.ts";
import { shardPairsLine } from "./shard-pairs.ts";
import type { OpenLoopRoutingRun, RoutingResults } from "./types.ts";

const f = (x: number | null | undefined, digits = 0) => (x === null || x === undefined ? "–" : x.toFixed(digits));

/** The arrival schedule of a run, in words. */
function arrivalsOf(r: OpenLoopRoutingRun): string {
  const a = r.arrivals;
  if (a.mode === "trace") return `seed ${r.seed}: minutes ${a.from_minutes}–${a.from_minutes + a.minutes} at speed ${a.speed.toFixed(3)}`;
  return `seed ${r.seed}: rateScale ${a.rate_scale.toFixed(3)}, ${a.stages} stages`;
}

/** routing.md's section of one open-loop trace: how it ran, then router × figures. */
function section(results: RoutingResults, trace: string): string[] {
  const runs = (results.open_loop_runs ?? []).filter((r) => r.trace === trace);
  const setup = results.open_loop_setups?.find((s) => s.trace === trace);
  const cells = aggregateOpenLoop(runs);
  const lines: string[] = [`## open-loop · ${trace}`, ""];
  if (setup) {
    lines.push(setup.method, "");
    lines.push(
      `Fleet: ${setup.workers} × ${setup.preset} at time scale ${setup.time_scale} (${setup.kv_capacity_tokens_per_worker.toLocaleString("en")} tokens of KV cache per worker, context ${setup.max_model_len.toLocaleString("en")}); goodput counts requests with TTFT ≤ ${setup.slo_ttft_ms} ms (2 s of unscaled GPU time × the time scale) over every request of the trace; a request not answered in full within ${setup.timeout_ms / 1000} s is an error.`,
      "",
    );
  }
  const seeds = axis(runs.filter((r) => r.strategy === runs[0]?.strategy), (r) => r);
  const loads = seeds.map((r) => {
    const stages = r.load.stages ? `; per stage, its rate: load at the ceiling – without cache: ${r.load.stages.map((s) => `${f(s.rate_per_s, 1)}/s: ${f(s.at_ceiling, 2)}–${f(s.without_cache, 2)}`).join(", ")}` : "";
    // The whole trace's ceiling; a run's kv_ceiling is over the requests it answered (kv_ceiling_trace absent: results that predate it, where kv_ceiling was this).
    return `${arrivalsOf(r)}: ${r.requests} requests, offered ${f(r.offered_rps, 1)}/s, load ${f(r.load.at_ceiling, 2)} at the ceiling (${f(r.load.without_cache, 2)} without cache)${stages}, ceiling ${f(r.kv_ceiling_trace ?? r.kv_ceiling, 3)}, working set ${Math.round(r.working_set_tokens / 1000).toLocaleString("en")}k tokens`;
  });
  if (loads.length > 0) lines.push("Schedules (the cost model's load, bench/traces/fleet-load.ts):", "", ...loads.map((l) => `- ${l}`), "");
  lines.push(
    "| router | kv_hit (of the ceiling) | TTFT p50 / p95 / p99 ms | goodput | max backend share | errors · overflow / requests | client lag p99 ms | server queue wait ms |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  );
  for (const s of strategiesIn(runs)) {
    const c = cells.get(openLoopKey(trace, s));
    if (!c) continue;
    lines.push(
      `| ${s} | ${f(c.kv_hit, 3)} (${f(c.kv_of_ceiling, 2)}) | ${atLeastMark(c, "p50")}${f(c.p50)} / ${atLeastMark(c, "p95")}${f(c.p95)} / ${atLeastMark(c, "p99")}${f(c.p99)} | ${f(c.goodput, 3)} | ${f(c.max_share, 3)} | ${c.errors} · ${c.overflow} / ${c.requests} | ${f(c.lag_p99, 1)} | ${f(c.server_wait_ms)} |`,
    );
  }
  const sharded = shardPairsLine(runs);
  if (sharded) lines.push("", sharded);
  const decisions = reasonLines(runs);
  if (decisions.length > 0) lines.push("", `kvgate's decisions (x-kvgate-reason, over every seed): ${decisions.join("; ")}.`);
  lines.push(
    "",
    `Medians over seeds (errors and overflow summed); ${kvShareRule(runs)} ${ttftMarkRule(results)} Client lag: how late the replay sent a request after it was due (timers, rendering: the client's own share); server queue wait: the workers' \`vllm:num_requests_waiting\` integrated over the run, per request sent.`,
    "",
  );
  return lines;
}

/** What a kv_hit's share of the ceiling is over, as the runs were made (kv_ceiling_trace absent: before both were taken over the same requests). */
function kvShareRule(runs: readonly OpenLoopRoutingRun[]): string {
  if (runs.some((r) => r.kv_ceiling_trace === undefined)) return "kv_hit's share of the ceiling divides kv_hit over the requests each run answered by the ceiling over every request of the trace (these runs predate taking both over the same requests).";
  return "kv_hit's share of the ceiling is over the requests each run answered, the ceiling's hits on those.";
}

/** What a TTFT figure is, as the results count it (ttft_rule absent: before timeouts were counted). */
function ttftMarkRule(results: RoutingResults): string {
  if (results.ttft_rule === undefined) return "TTFT is over the requests answered in full only (these runs predate counting a request that timed out): no figure is a bound, and one of a router with more timeouts is lower than it was.";
  return "A TTFT marked ≥ is a lower bound: requests that timed out before their first token reach it.";
}

/** Per kvgate strategy, the share of its requests each route reason decided, most first. */
function reasonLines(runs: readonly OpenLoopRoutingRun[]): string[] {
  const out: string[] = [];
  for (const s of strategiesIn(runs)) {
    const counts: Record<string, number> = {};
    for (const r of runs) if (r.strategy === s) for (const [reason, n] of Object.entries(r.route_reasons ?? {})) counts[reason] = (counts[reason] ?? 0) + n;
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    if (total === 0) continue;
    const shares = Object.entries(counts).sort((a, b) => b[1] - a[1]);
    out.push(`${s}: ${shares.map(([reason, n]) => `${reason} ${(n / total).toFixed(2)}`).join(", ")}`);
  }
  return out;
}

/** routing.md's open-loop sections, one per trace that ran. */
export function renderOpenLoopSections(results: RoutingResults): string[] {
  const runs = results.open_loop_runs ?? [];
  return axis(runs, (r) => r.trace).flatMap((trace) => section(results, trace));
}

/** The progress line printed after an open-loop run. */
export function openLoopProgress(run: OpenLoopRoutingRun): string {
  const t = run.ttft_ms;
  const lag = run.queueing.send_lag_ms;
  return (
    `kv_hit ${f(run.kv_hit, 3)} of ${f(run.kv_ceiling, 3)} ttft p50 ${atLeastMark(t, "p50")}${f(t.p50)} p95 ${atLeastMark(t, "p95")}${f(t.p95)} p99 ${atLeastMark(t, "p99")}${f(t.p99)} ms  goodput ${f(run.goodput.share, 2)}` +
    `  lag p99 ${f(lag.p99)} ms  queue wait ${f(run.queueing.server?.mean_wait_ms)} ms  errors ${run.errors}/${run.sent} (${run.overflow} overflow) of ${run.requests}  ${(run.wall_ms / 1000).toFixed(0)}s`
  );
}
