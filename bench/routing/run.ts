/**
 * npm run bench:routing [-- --quick] [--seeds 3] [--regime roomy,pressured] [--trace multi-turn,...]
 *                       [--strategy prefix-aware,...] [--sessions 8,16] [--peers sglang-cache_aware,...|none]
 *                       [--out DIR] [--report-only]
 *
 * Replays seeded session traces through kvgate (served by Miniflare, one Durable Object per run)
 * in front of a fresh simulated fleet of 4 GPU workers (empty caches) for every strategy, regime,
 * trace, concurrency and seed, and through each installed peer router on a fresh fleet of its own.
 * Every router is warmed up the same way first. Writes bench/results/routing.json, routing.md and
 * routing.svg.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Strategy } from "../../src/config/schema.ts";
import { PRESETS, startFleet, type Fleet } from "../fleet/index.ts";
import { startGateway } from "../harness/gateway.ts";
import { replay, summarize, type ReplayOptions } from "../replay/index.ts";
import { generateTrace, traceFootprint } from "../traces/index.ts";
import { renderChart } from "./chart.ts";
import { parseRoutingArgs } from "./cli-args.ts";
import { ceilingOf } from "./ceiling.ts";
import { kvgateConfig } from "./kvgate-config.ts";
import { MODEL, REGIMES, isKvgateStrategy, points, traceOf, type Point, type Regime } from "./matrix.ts";
import { selectPeers, type RoutingPeer } from "./peers.ts";
import { renderReport } from "./report.ts";
import type { RoutingResults, RoutingRun } from "./types.ts";
import { WARM_UP_REQUESTS, warmUp } from "./warm-up.ts";
import { shareBetween, workerRequestCounts } from "./worker-share.ts";

const DEFAULT_RESULTS = resolve(import.meta.dirname, "..", "results");
let RESULTS = DEFAULT_RESULTS;

/** A router in front of a run's fleet: where the replay sends, and how to stop it. */
interface RunRouter {
  target: Pick<ReplayOptions, "baseUrl" | "apiKey" | "headers">;
  stop(): Promise<void>;
}

/** How a point's router starts: kvgate with the point's strategy, or the peer of that name. */
interface RouterStart {
  /** A peer names no backend in its answers: its share is counted at the workers. */
  peer: boolean;
  start(fleet: Fleet): Promise<RunRouter>;
}

function routerFor(p: Point, peers: readonly RoutingPeer[]): RouterStart {
  const name = p.strategy;
  if (isKvgateStrategy(name)) return { peer: false, start: (fleet) => startKvgate(name, p.regime, fleet) };
  const peer = peers.find((x) => x.name === name);
  if (!peer) throw new Error(`no router named ${name}`);
  return { peer: true, start: (fleet) => startPeer(peer, fleet) };
}

async function startKvgate(strategy: Strategy, regime: Regime, fleet: Fleet): Promise<RunRouter> {
  const gateway = await startGateway({ config: kvgateConfig(strategy, regime, fleet.urls) });
  return { target: { baseUrl: gateway.url, apiKey: gateway.key }, stop: () => gateway.dispose() };
}

async function startPeer(peer: RoutingPeer, fleet: Fleet): Promise<RunRouter> {
  // Peer logs go to a file, not a pipe: an undrained pipe would stall a busy peer.
  const server = await peer.start(fleet.urls, join(tmpdir(), `kvgate-bench-routing-${peer.name}.log`));
  return { target: { baseUrl: server.url, headers: server.headers }, stop: () => server.stop() };
}

async function runPoint(p: Point, router: RouterStart): Promise<{ run: RoutingRun; errorSamples: RoutingResults["error_samples"] }> {
  const trace = traceOf(p);
  const fleet = await startFleet({ workers: 4, basePort: 0, preset: p.regime.preset, timeScale: p.regime.timeScale, servedModelName: MODEL });
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
  writeFileSync(join(RESULTS, "routing.md"), renderReport(results));
  writeFileSync(join(RESULTS, "routing.svg"), renderChart(results));
}

async function main(): Promise<void> {
  const args = parseRoutingArgs(process.argv.slice(2), DEFAULT_RESULTS);
  RESULTS = args.out;
  if (args.reportOnly) {
    write(JSON.parse(readFileSync(join(RESULTS, "routing.json"), "utf8")) as RoutingResults);
    return;
  }
  const { peers, notes } = selectPeers(args.peers);
  for (const note of notes) console.log(note);
  const plan = points({ ...args, peers: peers.map((p) => p.name) });
  const results: RoutingResults = {
    command: `npm run bench:routing -- ${process.argv.slice(2).join(" ")}`.trim(),
    date: new Date().toISOString(),
    quick: args.quick,
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
    runs: [],
  };
  const started = Date.now();
  for (const [i, p] of plan.entries()) {
    if (!results.ceilings.some((c) => c.regime === p.regime.name && c.trace === p.trace && c.sessions === p.sessions && c.seed === p.seed)) {
      results.ceilings.push({ regime: p.regime.name, trace: p.trace, sessions: p.sessions, seed: p.seed, kv_hit: await ceilingOf(traceOf(p)) });
    }
    const router = routerFor(p, peers);
    const head = `[${i + 1}/${plan.length} ${((Date.now() - started) / 1000).toFixed(0)}s] ${p.regime.name} ${p.trace} ${p.sessions}s seed${p.seed} ${p.strategy.padEnd(18)}`;
    let outcome: Awaited<ReturnType<typeof runPoint>>;
    try {
      outcome = await runPoint(p, router);
    } catch (e) {
      // A peer that fails to start or to answer the warm-up leaves its cell empty; kvgate failing is a bug.
      if (!router.peer) throw e;
      console.log(`${head} skipped: ${(e as Error).message}`);
      continue;
    }
    const { run, errorSamples } = outcome;
    results.runs.push(run);
    results.error_samples.push(...errorSamples);
    write(results);
    const t = run.ttft_ms;
    console.log(`${head} kv_hit ${run.kv_hit?.toFixed(3)} ttft p50 ${t.p50?.toFixed(0)} p95 ${t.p95?.toFixed(0)} ms  errors ${run.errors}/${run.requests}`);
  }
}

await main();
