/**
 * npm run bench:routing-virtual [-- --trace mooncake] [--seeds 6] [--jitter-seeds 16] [--hop-ms 10] [--pre-route-hop-ms 10] [--ms-per-mb 50]
 *   [--strategy prefix-aware,least-loaded,round-robin] [--shards 2,4] [--threads N] [--quick]
 *   [--out bench/results] [--report-only] [--chain-only] [--scheduling-policy fcfs,priority]
 *   [--regime roomy,pressured] [--sessions 8,16]
 *
 * The open-loop traces of bench:routing through kvgate's routing code and the fleet simulator's
 * engine in one process, in virtual time (bench/virtual/): deterministic for its inputs, and
 * seconds a run instead of minutes, so a comparison can take many draws of the same traffic.
 * `--trace` also takes bench:routing's closed-loop traces (multi-turn, rag, tool-loop,
 * single-turn, hot-prefix), run at each point of `--regime`'s sweep (`--sessions` picks points),
 * 3 seeds, hops of 0–5 ms before routing and 0–5 after and a body's read at 50 ms per MB unless
 * --pre-route-hop-ms, --hop-ms and --ms-per-mb say otherwise (bench/virtual/delays.ts), and
 * set against the same points in bench/results/routing.json when it has them (fleet-fit.ts), as
 * are an open-loop trace's seeds.
 * Writes routing-virtual.json ({"runs":[…]}) and routing-virtual.md. --chain-only: the Worker as it
 * was before f50698c (no prompt size beside a cut chain), for an A/B of that change.
 * --scheduling-policy: the workers' (bench/fleet's flag of that name); each router runs in front of
 * each, a priority fleet's named `+priority` (kvgate then sets every request's priority).
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { Worker } from "node:worker_threads";
import { commitOf } from "../harness/commit.ts";
import { MOONCAKE_SLICE_STARTS, OPEN_LOOP_SETUPS, isOpenLoopTrace } from "../routing/open-loop-matrix.ts";
import { parseVirtualArgs } from "./args.ts";
import { routerName, type VirtualPoint, type VirtualRun } from "./point.ts";
import { renderVirtualReport, type VirtualResults } from "./report.ts";
import { fleetFit, openLoopFleetFit } from "./fleet-fit.ts";
import { CLOSED_LOOP_DELAYS, OPEN_LOOP_DELAYS, type Delays } from "./delays.ts";
import type { RoutingResults } from "../routing/types.ts";
import { runCli } from "../harness/cli.ts";
import { TTFT_RULE } from "../replay/index.ts";

const ROOT = resolve(import.meta.dirname, "../..");

const args = await runCli("bench:routing-virtual", () => parseVirtualArgs(process.argv.slice(2), join(ROOT, "bench/results")));
const jsonPath = join(args.out, "routing-virtual.json");
const mdPath = join(args.out, "routing-virtual.md");

if (args.reportOnly) {
  const results = JSON.parse(await readFile(jsonPath, "utf8")) as VirtualResults;
  // Results made before the fit was taken get it now, from the fleet's runs as committed here
  // (not a --chain-only run's: its Worker is not the one the fleet ran).
  if (!results.fleet_fit && !results.chain_only) {
    const fit = await fitAgainstFleet(results.runs);
    if (fit) {
      results.fleet_fit = fit;
      await writeFile(jsonPath, `${JSON.stringify(results, null, 2)}\n`);
      console.log(`wrote ${jsonPath} (its runs against the fleet's)`);
    }
  }
  await writeFile(mdPath, renderVirtualReport(results));
  console.log(`wrote ${mdPath}`);
  process.exit(0);
}

const { traces, regimes, strategies, shards, jitterSeeds, policies, chainOnly } = args;
/** Each trace's delays (bench/virtual/delays.ts), as far as the flags do not set them. */
const delaysOf = (trace: string): Delays => {
  const fitted = isOpenLoopTrace(trace) ? OPEN_LOOP_DELAYS : CLOSED_LOOP_DELAYS;
  return { msPerMb: args.msPerMb ?? fitted.msPerMb, preRouteHopMs: args.preRouteHopMs ?? fitted.preRouteHopMs, hopMs: args.hopMs ?? fitted.hopMs };
};

const points: VirtualPoint[] = [];
for (const trace of traces) {
  const seeds = args.quick ? 2 : (args.seeds ?? (trace === "mooncake" ? MOONCAKE_SLICE_STARTS.length : 3));
  const { hopMs, preRouteHopMs, msPerMb } = delaysOf(trace);
  // An open-loop trace is one point; a closed-loop one, each point of each regime's sweep.
  const at: { regime?: string; sessions?: number }[] = isOpenLoopTrace(trace)
    ? [{}]
    : regimes.flatMap((r) => (args.quick ? [r.sessions[1] as number] : r.sessions).filter((n) => !args.sessions || args.sessions.includes(n)).map((sessions) => ({ regime: r.name, sessions })));
  for (const where of at) {
    for (let seed = 1; seed <= seeds; seed++) {
      for (let jitterSeed = 1; jitterSeed <= jitterSeeds; jitterSeed++) {
        for (const schedulingPolicy of policies) {
          for (const strategy of strategies) points.push({ trace, ...where, seed, strategy, shards: 1, jitterSeed, hopMs, preRouteHopMs, msPerMb, chainOnly, schedulingPolicy });
          if (strategies.includes("prefix-aware")) for (const n of shards) points.push({ trace, ...where, seed, strategy: "prefix-aware", shards: n, jitterSeed, hopMs, preRouteHopMs, msPerMb, chainOnly, schedulingPolicy });
        }
      }
    }
  }
}

const hops = new Set(points.map((p) => p.hopMs));
const started = performance.now();
const runs = await runAll(points, args.threads);
// Routers in the order they were asked for (the strategies, then prefix-aware over shards): the report's rows follow it.
const routerOrder = [...new Set(points.map((p) => routerName(p.strategy, p.shards, p.schedulingPolicy)))];
const rank = (r: VirtualRun) => routerOrder.indexOf(r.strategy);
runs.sort((a, b) => a.trace.localeCompare(b.trace) || (a.regime ?? "").localeCompare(b.regime ?? "") || (a.sessions ?? 0) - (b.sessions ?? 0) || a.seed - b.seed || rank(a) - rank(b) || a.jitter_seed - b.jitter_seed);
const fit = chainOnly ? null : await fitAgainstFleet(runs);
const results: VirtualResults = {
  command: `npm run bench:routing-virtual -- ${process.argv.slice(2).join(" ")}`.trim(),
  date: new Date().toISOString(),
  commit: commitOf(ROOT),
  hop_ms: hops.size === 1 ? ([...hops][0] as number) : null,
  jitter_seeds: jitterSeeds,
  chain_only: chainOnly,
  ...(fit ? { fleet_fit: fit } : {}),
  methods: Object.fromEntries(traces.filter(isOpenLoopTrace).map((t) => [t, OPEN_LOOP_SETUPS[t].method])),
  ttft_rule: TTFT_RULE,
  runs,
};
await mkdir(args.out, { recursive: true });
await writeFile(jsonPath, `${JSON.stringify(results, null, 2)}\n`);
await writeFile(mdPath, renderVirtualReport(results));
console.log(`${runs.length} runs in ${Math.round((performance.now() - started) / 1000)} s; wrote ${jsonPath} and ${mdPath}`);

/** `runs` against bench:routing's committed runs of the same points and seeds, when this checkout has any. */
async function fitAgainstFleet(runs: readonly VirtualRun[]): Promise<VirtualResults["fleet_fit"] | null> {
  let fleet: RoutingResults;
  try {
    fleet = JSON.parse(await readFile(join(ROOT, "bench/results/routing.json"), "utf8")) as RoutingResults;
  } catch {
    return null;
  }
  const fits = [...fleetFit(runs, fleet.runs), ...openLoopFleetFit(runs, fleet.open_loop_runs ?? [])];
  return fits.length === 0 ? null : { against: `bench/results/routing.json of ${fleet.date.slice(0, 10)}`, fits };
}

/** Every point, spread over `threads` worker threads (each its own clock and globals). */
async function runAll(todo: readonly VirtualPoint[], count: number): Promise<VirtualRun[]> {
  const done: VirtualRun[] = [];
  let next = 0;
  const one = (): Promise<void> =>
    new Promise((resolveAll, reject) => {
      const worker = new Worker(new URL("./thread.ts", import.meta.url));
      const feed = () => {
        const p = todo[next++];
        if (p) worker.postMessage(p);
        else void worker.terminate().then(() => resolveAll());
      };
      worker.on("message", (run: VirtualRun) => {
        done.push(run);
        console.log(`[${done.length}/${todo.length}] ${run.regime ? `${run.regime} ` : ""}${run.trace}${run.sessions ? ` ${run.sessions}s` : ""} seed ${run.seed} ${run.strategy} jitter ${run.jitter_seed}: kv_hit ${run.kv_hit?.toFixed(4)} ttft p50 ${Math.round(run.ttft_ms.p50 ?? NaN)} p95 ${Math.round(run.ttft_ms.p95 ?? NaN)} ms, errors ${run.errors}/${run.requests}`);
        feed();
      });
      worker.on("error", reject);
      feed();
    });
  await Promise.all(Array.from({ length: Math.min(count, todo.length) }, one));
  return done;
}
