/**
 * npm run bench:routing [-- --quick] [--seeds 3] [--regime roomy,pressured,open-loop] [--trace multi-turn,...,mooncake,b2b-saas]
 *                       [--strategy prefix-aware,...] [--shards 2,4] [--sessions 8,16] [--peers sglang-cache_aware,...|none]
 *                       [--out DIR] [--report-only] [--merge] [--scheduling-policy fcfs,priority]
 *
 * Replays seeded session traces through kvgate (served by Miniflare, one Durable Object per run)
 * in front of a fresh simulated fleet of 4 GPU workers (empty caches) for every strategy, regime,
 * trace, concurrency and seed, and through each installed peer router on a fresh fleet of its own.
 * Then the open-loop traces (Mooncake's conversation trace at its own timestamps, llm-d's b2b-saas
 * ramp; open-loop-matrix.ts) through the same routers, a fresh fleet per run. Every router is
 * warmed up the same way first. Writes bench/results/routing.json, routing.md and routing.svg.
 * --merge keeps the runs already written of every point this run does not make (merge.ts): the
 * whole sweep takes longer than one sitting, and can be made in parts. --shards 2,4 adds
 * prefix-aware over that many routing objects (`prefix-aware@2`...) beside the strategies.
 * --scheduling-policy fcfs,priority runs kvgate's routers again in front of workers that order
 * their queues by the priority kvgate sets (`round-robin+priority`...).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { PRESETS, startFleet } from "../fleet/index.ts";
import { commitOf } from "../harness/commit.ts";
import { replay, summarize, TTFT_RULE } from "../replay/index.ts";
import { generateTrace, traceFootprint } from "../traces/index.ts";
import { renderChart } from "./chart.ts";
import { parseRoutingArgs } from "./cli-args.ts";
import { ceilingOf } from "./ceiling.ts";
import { MODEL, REGIMES, points, traceOf, type Point } from "./matrix.ts";
import { mergeBase, mergeConflict, runKey } from "./merge.ts";
import { OPEN_LOOP_REGIME, OPEN_LOOP_SETUPS, checkTraceNames, openLoopPoints, scheduleOf, type OpenLoopPoint, type OpenLoopSchedule } from "./open-loop-matrix.ts";
import { openLoopProgress } from "./open-loop-report.ts";
import { runOpenLoopPoint } from "./open-loop-run.ts";
import { selectPeers } from "./peers.ts";
import { relatedResults } from "./related-results.ts";
import { renderReport } from "./report.ts";
import { routerFor, type RouterStart } from "./routers.ts";
import type { RoutingResults, RoutingRun } from "./types.ts";
import { WARM_UP_REQUESTS, warmUp } from "./warm-up.ts";
import { shareBetween, workerRequestCounts } from "./worker-share.ts";
import { runCli } from "../harness/cli.ts";

const DEFAULT_RESULTS = resolve(import.meta.dirname, "..", "results");
let RESULTS = DEFAULT_RESULTS;

async function runPoint(p: Point, router: RouterStart): Promise<{ run: RoutingRun; errorSamples: RoutingResults["error_samples"] }> {
  const trace = traceOf(p);
  const fleet = await startFleet({ workers: 4, basePort: 0, preset: p.regime.preset, timeScale: p.regime.timeScale, servedModelName: MODEL, schedulingPolicy: router.schedulingPolicy });
  try {
    const running = await router.start(fleet);
    try {
      const target = { ...running.target, model: MODEL, timeoutMs: 300_000 };
      await warmUp(target);
      const before = router.peer ? await workerRequestCounts(fleet.urls) : undefined;
      const result = await replay(trace, target);
      const s = summarize(result);
      if (before) s.backend_share = shareBetween(before, await workerRequestCounts(fleet.urls));
      const run = { regime: p.regime.name, trace: p.trace, strategy: p.strategy, sessions: p.sessions, seed: p.seed, ...s };
      // A few failures of each run, verbatim: an error count alone says nothing about its cause.
      const errorSamples = result.requests
        .filter((r) => r.error !== null)
        .slice(0, 3)
        .map((r) => ({ regime: run.regime, trace: run.trace, strategy: run.strategy, sessions: run.sessions, seed: run.seed, status: r.status, error: r.error ?? "" }));
      return { run, errorSamples };
    } finally {
      await running.stop();
    }
  } finally {
    await fleet.close();
  }
}

function footprints(): RoutingResults["footprints"] {
  const out: RoutingResults["footprints"] = [];
  for (const regime of REGIMES) {
    for (const kind of ["multi-turn", "rag", "tool-loop", "single-turn", "hot-prefix"] as const) {
      for (const sessions of regime.sessions) {
        const f = traceFootprint(generateTrace(kind, { ...regime.trace[kind], sessions, seed: 1 }));
        out.push({ regime: regime.name, trace: kind, sessions, working_set_tokens: f.sharedTokens + f.privateTokens, max_prompt_tokens: f.maxPromptTokens });
      }
    }
  }
  return out;
}

function write(results: RoutingResults): void {
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "routing.json"), `${JSON.stringify(results, null, 1)}\n`);
  writeFileSync(join(RESULTS, "routing.md"), renderReport(results, relatedResults(RESULTS)));
  writeFileSync(join(RESULTS, "routing.svg"), renderChart(results));
}

async function main(): Promise<void> {
  const args = parseRoutingArgs(process.argv.slice(2), DEFAULT_RESULTS);
  RESULTS = args.out;
  if (args.reportOnly) {
    write(JSON.parse(readFileSync(join(RESULTS, "routing.json"), "utf8")) as RoutingResults);
    return;
  }
  checkTraceNames(args.traces);
  const { peers, notes } = selectPeers(args.peers);
  for (const note of notes) console.log(note);
  const names = peers.map((p) => p.name);
  const plan: Planned[] = [
    ...points({ ...args, peers: names }).map((p): Planned => ({ loop: "closed", p })),
    ...openLoopPoints({ ...args, peers: names }).map((p): Planned => ({ loop: "open", p })),
  ];
  const command = `npm run bench:routing -- ${process.argv.slice(2).join(" ")}`.trim();
  const date = new Date().toISOString();
  const fresh: RoutingResults = {
    command,
    date,
    quick: args.quick,
    parts: [{ command, date, commit: COMMIT }],
    regimes: REGIMES.map((r) => ({
      name: r.name,
      preset: r.preset,
      time_scale: r.timeScale,
      kv_capacity_tokens_per_worker: PRESETS[r.preset].kvCapacityBlocks * 16,
      workers: 4,
      sessions: r.sessions,
      trace_options: r.trace,
    })),
    footprints: footprints(),
    ceilings: [],
    error_samples: [],
    peers: peers.map((p) => ({ name: p.name, package: p.package, version: p.version, settings: p.settings })),
    warm_up_requests: WARM_UP_REQUESTS,
    ttft_rule: TTFT_RULE,
    runs: [],
    open_loop_setups: Object.values(OPEN_LOOP_SETUPS).map((s) => ({
      trace: s.kind,
      preset: s.preset,
      time_scale: s.timeScale,
      workers: 4,
      kv_capacity_tokens_per_worker: PRESETS[s.preset].kvCapacityBlocks * 16,
      max_model_len: s.maxModelLen,
      slo_ttft_ms: s.sloTtftMs,
      timeout_ms: s.timeoutMs,
      method: s.method,
    })),
    open_loop_runs: [],
  };
  const results = args.merge ? mergedWith(fresh, plan) : fresh;
  const started = Date.now();
  for (const [i, item] of plan.entries()) {
    const router = routerFor(item.p.strategy, item.loop === "closed" ? item.p.regime : item.p.setup, peers);
    const head = `[${i + 1}/${plan.length} ${((Date.now() - started) / 1000).toFixed(0)}s] ${describe(item)} ${item.p.strategy.padEnd(18)}`;
    try {
      const line = item.loop === "closed" ? await closedLoopRun(item.p, router, results) : await openLoopRun(item.p, router, results);
      write(results);
      console.log(`${head} ${line}`);
    } catch (e) {
      // A peer that fails to start or to answer the warm-up leaves its cell empty; kvgate failing is a bug.
      if (!router.peer) throw e;
      console.log(`${head} skipped: ${(e as Error).message}`);
    }
  }
}

type Planned = { loop: "closed"; p: Point } | { loop: "open"; p: OpenLoopPoint };

const COMMIT = commitOf(resolve(import.meta.dirname, "..", ".."));

/** --merge: the results already written, less the runs of the points planned, under this run's header. */
function mergedWith(fresh: RoutingResults, plan: readonly Planned[]): RoutingResults {
  const file = join(RESULTS, "routing.json");
  if (!existsSync(file)) return fresh;
  const prior = JSON.parse(readFileSync(file, "utf8")) as RoutingResults;
  const conflict = mergeConflict(prior, fresh);
  if (conflict) throw new Error(`--merge: ${conflict}; run without --merge to start the results afresh`);
  const planned = new Set(
    plan.map((item) =>
      item.loop === "closed"
        ? runKey({ regime: item.p.regime.name, trace: item.p.trace, strategy: item.p.strategy, sessions: item.p.sessions, seed: item.p.seed })
        : runKey({ regime: OPEN_LOOP_REGIME, trace: item.p.setup.kind, strategy: item.p.strategy, sessions: 0, seed: item.p.seed }),
    ),
  );
  return mergeBase(prior, fresh, planned);
}

function describe(item: Planned): string {
  if (item.loop === "closed") return `${item.p.regime.name} ${item.p.trace} ${item.p.sessions}s seed${item.p.seed}`;
  return `open-loop ${item.p.setup.kind} seed${item.p.seed}`;
}

/** Runs a closed-loop point, adds it to `results`, and returns its progress line. */
async function closedLoopRun(p: Point, router: RouterStart, results: RoutingResults): Promise<string> {
  if (!results.ceilings.some((c) => c.regime === p.regime.name && c.trace === p.trace && c.sessions === p.sessions && c.seed === p.seed)) {
    results.ceilings.push({ regime: p.regime.name, trace: p.trace, sessions: p.sessions, seed: p.seed, kv_hit: await ceilingOf(traceOf(p)) });
  }
  const { run, errorSamples } = await runPoint(p, router);
  results.runs.push({ ...run, commit: COMMIT, at: new Date().toISOString() });
  results.error_samples.push(...errorSamples);
  const t = run.ttft_ms;
  return `kv_hit ${run.kv_hit?.toFixed(3)} ttft p50 ${t.p50?.toFixed(0)} p95 ${t.p95?.toFixed(0)} ms  errors ${run.errors}/${run.requests}`;
}

/** A trace and seed's schedule, built once for all its routers (b2b-saas renders 750 prompts for it). */
const schedules = new Map<string, OpenLoopSchedule>();

function scheduleFor(p: OpenLoopPoint): OpenLoopSchedule {
  const k = `${p.setup.kind}|${p.seed}|${p.quick}`;
  let s = schedules.get(k);
  if (!s) schedules.set(k, (s = scheduleOf(p)));
  return s;
}

/** Runs an open-loop point, adds it to `results`, and returns its progress line. */
async function openLoopRun(p: OpenLoopPoint, router: RouterStart, results: RoutingResults): Promise<string> {
  const { run, errorSamples } = await runOpenLoopPoint(p, router, scheduleFor(p));
  (results.open_loop_runs ??= []).push({ ...run, commit: COMMIT, at: new Date().toISOString() });
  results.error_samples.push(...errorSamples);
  return openLoopProgress(run);
}

await runCli("bench:routing", main);
