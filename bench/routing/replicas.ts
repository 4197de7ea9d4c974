/**
 * npm run bench:routing-replicas [-- --quick] [--instances 1,2,4,8] [--sessions 8,16,24] [--seeds 3]
 *                                [--routers prefix-aware,sglang-cache_aware] [--turns N] [--out DIR] [--report-only]
 *
 * One index for every edge instance: the multi-turn trace (roomy regime) through N instances of a
 * router, every request landing on an instance of its own (bench/routing/fan-out.ts), on a fresh
 * fleet of 4 simulated GPU workers per run. kvgate's instances are separate gateway isolates that
 * share the group's Durable Object; SGLang's router runs as N independent processes. Writes
 * bench/results/routing-replicas.json and routing-replicas.md.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { PRESETS, startFleet } from "../fleet/index.ts";
import { replay, summarize } from "../replay/index.ts";
import { ceilingOf } from "./ceiling.ts";
import { MODEL, REGIMES, isKvgateStrategy, traceOf } from "./matrix.ts";
import { selectPeers, type RoutingPeer } from "./peers.ts";
import { startFanOut } from "./fan-out.ts";
import { startInstances } from "./replica-routers.ts";
import { parseReplicasArgs, type ReplicasArgs } from "./replicas-args.ts";
import { renderReplicasReport } from "./replicas-report.ts";
import type { ReplicaResults, ReplicaRun } from "./replicas-types.ts";
import { WARM_UP_REQUESTS, warmUp } from "./warm-up.ts";
import { shareBetween, workerRequestCounts } from "./worker-share.ts";
import { runCli } from "../harness/cli.ts";

const DEFAULT_RESULTS = resolve(import.meta.dirname, "..", "results");
const REGIME = REGIMES.find((r) => r.name === "roomy") as (typeof REGIMES)[number];
const WORKERS = 4;
const TRACE = "multi-turn";

interface ReplicaPoint {
  router: string;
  instances: number;
  sessions: number;
  seed: number;
  turns: number | undefined;
}

type ErrorSample = ReplicaResults["error_samples"][number];

async function runPoint(p: ReplicaPoint, peers: readonly RoutingPeer[]): Promise<{ run: ReplicaRun; errorSamples: ErrorSample[] }> {
  const trace = traceOf({ regime: REGIME, trace: TRACE, sessions: p.sessions, seed: p.seed, turns: p.turns });
  const fleet = await startFleet({ workers: WORKERS, basePort: 0, preset: REGIME.preset, timeScale: REGIME.timeScale, servedModelName: MODEL });
  try {
    const routers = await startInstances(p.router, p.instances, REGIME, fleet, peers);
    try {
      const fanOut = await startFanOut(routers.urls, p.seed);
      try {
        const common = { ...routers.auth, model: MODEL, timeoutMs: 300_000 };
        // Each instance pays its own start-up (a fresh isolate, a fresh process), then the fan-out its connections.
        for (const url of routers.urls) await warmUp({ ...common, baseUrl: url });
        await warmUp({ ...common, baseUrl: fanOut.url });
        const workersBefore = await workerRequestCounts(fleet.urls);
        const sentBefore = fanOut.counts();
        const result = await replay(trace, { ...common, baseUrl: fanOut.url });
        const summary = summarize(result);
        // Counted at the workers for every router alike: a peer names no backend in its answers.
        summary.backend_share = shareBetween(workersBefore, await workerRequestCounts(fleet.urls));
        const sent = fanOut.counts().map((n, i) => n - (sentBefore[i] ?? 0));
        const total = sent.reduce((a, b) => a + b, 0);
        const run: ReplicaRun = { router: p.router, instances: p.instances, sessions: p.sessions, seed: p.seed, ...summary, instance_share: sent.map((n) => (total === 0 ? 0 : n / total)) };
        const errorSamples = result.requests
          .filter((r) => r.error !== null)
          .slice(0, 3)
          .map((r) => ({ router: p.router, instances: p.instances, sessions: p.sessions, seed: p.seed, status: r.status, error: r.error ?? "" }));
        return { run, errorSamples };
      } finally {
        await fanOut.close();
      }
    } finally {
      await routers.stop();
    }
  } finally {
    await fleet.close();
  }
}

/** Every run, a whole comparison at a time: per sessions and seed, each router at each instance count. */
function plan(args: ReplicasArgs, routers: readonly string[]): ReplicaPoint[] {
  const out: ReplicaPoint[] = [];
  for (const sessions of args.sessions) {
    for (let seed = 1; seed <= args.seeds; seed++) {
      for (const router of routers) for (const instances of args.instances) out.push({ router, instances, sessions, seed, turns: args.turns });
    }
  }
  return out;
}

function write(dir: string, results: ReplicaResults): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "routing-replicas.json"), `${JSON.stringify(results, null, 1)}\n`);
  writeFileSync(join(dir, "routing-replicas.md"), renderReplicasReport(results));
}

async function main(): Promise<void> {
  const args = parseReplicasArgs(process.argv.slice(2), DEFAULT_RESULTS);
  if (args.reportOnly) {
    write(args.out, JSON.parse(readFileSync(join(args.out, "routing-replicas.json"), "utf8")) as ReplicaResults);
    return;
  }
  const { peers, notes } = selectPeers(args.routers.filter((r) => !isKvgateStrategy(r)).join(",") || "none");
  for (const note of notes) console.log(note);
  const routers = args.routers.filter((r) => isKvgateStrategy(r) || peers.some((p) => p.name === r));
  const points = plan(args, routers);
  const results: ReplicaResults = {
    command: `npm run bench:routing-replicas -- ${process.argv.slice(2).join(" ")}`.trim(),
    date: new Date().toISOString(),
    quick: args.quick,
    regime: { name: REGIME.name, preset: REGIME.preset, time_scale: REGIME.timeScale, workers: WORKERS, kv_capacity_tokens_per_worker: PRESETS[REGIME.preset].kvCapacityBlocks * 16 },
    trace: TRACE,
    spread: "each request to one instance, picked by a seeded hash of its body (per request, not per session)",
    peers: peers.map((p) => ({ name: p.name, package: p.package, version: p.version, settings: p.settings })),
    warm_up_requests: WARM_UP_REQUESTS,
    ceilings: [],
    error_samples: [],
    runs: [],
  };
  const started = Date.now();
  for (const [i, p] of points.entries()) {
    if (!results.ceilings.some((c) => c.sessions === p.sessions && c.seed === p.seed)) {
      const kvHit = await ceilingOf(traceOf({ regime: REGIME, trace: TRACE, sessions: p.sessions, seed: p.seed, turns: p.turns }));
      results.ceilings.push({ sessions: p.sessions, seed: p.seed, kv_hit: kvHit });
    }
    const head = `[${i + 1}/${points.length} ${((Date.now() - started) / 1000).toFixed(0)}s] ${p.sessions}s seed${p.seed} ${p.router.padEnd(18)} ×${p.instances}`;
    let outcome: Awaited<ReturnType<typeof runPoint>>;
    try {
      outcome = await runPoint(p, peers);
    } catch (e) {
      // A peer that fails to start or to answer the warm-up leaves its cell empty; kvgate failing is a bug.
      if (isKvgateStrategy(p.router)) throw e;
      console.log(`${head} skipped: ${(e as Error).message}`);
      continue;
    }
    results.runs.push(outcome.run);
    results.error_samples.push(...outcome.errorSamples);
    write(args.out, results);
    const { kv_hit, ttft_ms: t, errors, requests, instance_share } = outcome.run;
    const spread = instance_share.map((s) => s.toFixed(2)).join("/");
    console.log(`${head} kv_hit ${kv_hit?.toFixed(3)} ttft p50 ${t.p50?.toFixed(0)} p95 ${t.p95?.toFixed(0)} ms  errors ${errors}/${requests}  instances ${spread}`);
  }
}

await runCli("bench:routing-replicas", main);
