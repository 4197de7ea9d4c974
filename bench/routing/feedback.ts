/**
 * npm run bench:routing-feedback [-- --quick] [--sessions 24,32] [--seeds 3]
 *                                [--configs right,kv-4x-big,kv-4x-small,rate-4x-slow] [--turns N] [--cold] [--out DIR] [--report-only]
 *
 * Feedback from the engines: the pressured regime's multi-turn trace (l4-7b at time scale 0.2,
 * where from 16 sessions on the working set exceeds one worker's KV cache) through kvgate's
 * prefix-aware, its deployments' kvCapacityBlocks set right, 4× too big and 4× too small (and
 * prefillTokensPerSec 4× too slow), each with feedback off and on (feedback.sampleRate 1: every
 * answer's usage read). A fresh fleet of 4 simulated workers and a fresh gateway per run; a
 * learning pass (the same trace shape at another seed, not counted) before the measured one,
 * unless --cold. Writes
 * bench/results/routing-feedback.json and routing-feedback.md: the kv_hit feedback recovers
 * against the right configuration's, and what each backend learned.
 *
 * --virtual: the same runs in virtual time (bench/virtual/: the routing code and the simulator's
 * engine in one process, a run in under a second), each seed --draws times with another draw of
 * the hops; written to bench/results/virtual-feedback/ unless --out says otherwise.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { GatewayConfigInput } from "../../src/config/schema.ts";
import type { GroupStatus } from "../../src/routing/protocol.ts";
import { PRESETS, startFleet } from "../fleet/index.ts";
import { startGateway } from "../harness/gateway.ts";
import { replay, summarize } from "../replay/index.ts";
import { LEARNING_SEED_OFFSET, runVirtualPoint } from "../virtual/point.ts";
import { CLOSED_LOOP_DELAYS } from "../virtual/delays.ts";
import type { LearnedSnapshot } from "../../src/routing/feedback.ts";
import { parseFeedbackArgs, type FeedbackArgs } from "./feedback-args.ts";
import { renderFeedbackReport } from "./feedback-report.ts";
import type { FeedbackConfig, FeedbackResults, FeedbackRun, LearnedFigures } from "./feedback-types.ts";
import { kvgateConfig } from "./kvgate-config.ts";
import { MODEL, REGIMES, traceOf } from "./matrix.ts";
import { WARM_UP_REQUESTS, warmUp } from "./warm-up.ts";
import { runCli } from "../harness/cli.ts";

const DEFAULT_RESULTS = resolve(import.meta.dirname, "..", "results");
const REGIME = REGIMES.find((r) => r.name === "pressured") as (typeof REGIMES)[number];
const WORKERS = 4;
const TRACE = "multi-turn";
/** Feedback on: every answer's usage is read, the most the demonstration can learn from. */
const SAMPLE_RATE = 1;

interface FeedbackPoint {
  config: FeedbackConfig;
  feedback: boolean;
  sessions: number;
  seed: number;
  turns: number | undefined;
  cold: boolean;
}

/** kvgate's group for the regime (what an operator who knows the servers would write), its two hints scaled by the config. */
function gatewayConfig(p: FeedbackPoint, workerUrls: readonly string[]): GatewayConfigInput {
  const base = kvgateConfig("prefix-aware", REGIME, workerUrls, 1, "fcfs", p.config);
  return {
    modelGroups: (base.modelGroups ?? []).map((g) => ({ ...g, feedback: { sampleRate: p.feedback ? SAMPLE_RATE : 0 } })),
  };
}

/** What the group's routing object learned of each backend, from its status. */
async function learnedOf(url: string, key: string): Promise<LearnedFigures> {
  const res = await fetch(`${url}/v1/kvgate/status`, { headers: { authorization: `Bearer ${key}` } });
  const body = (await res.json()) as { groups: GroupStatus[] };
  const backends = body.groups.find((g) => g.group === MODEL)?.backends ?? [];
  return learnedFigures(backends.map((b) => b.learned));
}

async function runPoint(p: FeedbackPoint): Promise<FeedbackRun> {
  const trace = traceOf({ regime: REGIME, trace: TRACE, sessions: p.sessions, seed: p.seed, turns: p.turns });
  const fleet = await startFleet({ workers: WORKERS, basePort: 0, preset: REGIME.preset, timeScale: REGIME.timeScale, servedModelName: MODEL });
  try {
    const gateway = await startGateway({ config: gatewayConfig(p, fleet.urls) });
    try {
      const target = { baseUrl: gateway.url, apiKey: gateway.key, model: MODEL, timeoutMs: 300_000 };
      await warmUp(target);
      if (!p.cold) await replay(traceOf({ regime: REGIME, trace: TRACE, sessions: p.sessions, seed: p.seed + LEARNING_SEED_OFFSET, turns: p.turns }), target);
      const summary = summarize(await replay(trace, target));
      return {
        config: p.config.name,
        feedback: p.feedback ? "on" : "off",
        sessions: p.sessions,
        seed: p.seed,
        requests: summary.requests,
        errors: summary.errors,
        kv_hit: summary.kv_hit,
        ttft_ms: { p50: summary.ttft_ms.p50, p95: summary.ttft_ms.p95 },
        ttft_later_turns_ms: { p50: summary.ttft_later_turns_ms.p50, p95: summary.ttft_later_turns_ms.p95 },
        learned: await learnedOf(gateway.url, gateway.key),
      };
    } finally {
      await gateway.dispose();
    }
  } finally {
    await fleet.close();
  }
}

/** The learned figures as the status endpoint gives them, per backend. */
function learnedFigures(backends: readonly LearnedSnapshot[]): LearnedFigures {
  return {
    kv_capacity_blocks: backends.map((b) => b.kvCapacityBlocks),
    chars_per_token: backends.map((b) => b.charsPerToken),
    prefill_tokens_per_sec: backends.map((b) => b.prefillTokensPerSec),
    capacity_steps: backends.map((b) => b.capacitySteps),
    usage_reports: backends.reduce((n, b) => n + b.reports.usage, 0),
  };
}

/** A point in virtual time, one draw of its hops: the same trace, configs and learning pass as on the fleet. */
function runVirtual(p: FeedbackPoint, draw: number): FeedbackRun {
  const run = runVirtualPoint({
    trace: TRACE,
    regime: REGIME.name,
    sessions: p.sessions,
    seed: p.seed,
    strategy: "prefix-aware",
    shards: 1,
    jitterSeed: draw,
    // A closed-loop point's delays, as bench:routing-virtual fits them to the fleet's.
    ...CLOSED_LOOP_DELAYS,
    feedback: p.feedback,
    learningPass: !p.cold,
    hints: { kv: p.config.kv, rate: p.config.rate },
  });
  return {
    config: p.config.name,
    feedback: p.feedback ? "on" : "off",
    sessions: p.sessions,
    seed: p.seed,
    jitter_seed: draw,
    requests: run.requests,
    errors: run.errors,
    kv_hit: run.kv_hit,
    ttft_ms: { p50: run.ttft_ms.p50, p95: run.ttft_ms.p95 },
    ttft_later_turns_ms: { p50: null, p95: null },
    learned: learnedFigures(run.learned ?? []),
  };
}

/** A whole comparison at a time: per sessions and seed, each config with feedback off, then on. */
function plan(args: FeedbackArgs): FeedbackPoint[] {
  const out: FeedbackPoint[] = [];
  for (const sessions of args.sessions) {
    for (let seed = 1; seed <= args.seeds; seed++) {
      for (const config of args.configs) for (const feedback of [false, true]) out.push({ config, feedback, sessions, seed, turns: args.turns, cold: args.cold });
    }
  }
  return out;
}

function write(dir: string, results: FeedbackResults): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "routing-feedback.json"), `${JSON.stringify(results, null, 1)}\n`);
  writeFileSync(join(dir, "routing-feedback.md"), renderFeedbackReport(results));
}

async function main(): Promise<void> {
  const args = parseFeedbackArgs(process.argv.slice(2), DEFAULT_RESULTS);
  if (args.reportOnly) {
    write(args.out, JSON.parse(readFileSync(join(args.out, "routing-feedback.json"), "utf8")) as FeedbackResults);
    return;
  }
  const preset = PRESETS[REGIME.preset];
  const results: FeedbackResults = {
    command: `npm run bench:routing-feedback -- ${process.argv.slice(2).join(" ")}`.trim(),
    date: new Date().toISOString(),
    quick: args.quick,
    regime: {
      name: REGIME.name,
      preset: REGIME.preset,
      time_scale: REGIME.timeScale,
      workers: WORKERS,
      trace: TRACE,
      kv_capacity_blocks_per_worker: preset.kvCapacityBlocks,
      prefill_tokens_per_sec: Math.round(1000 / (preset.prefillMsPerToken * REGIME.timeScale)),
    },
    sample_rate: SAMPLE_RATE,
    learning_pass: !args.cold,
    configs: args.configs,
    warm_up_requests: args.virtual ? 0 : WARM_UP_REQUESTS,
    ...(args.virtual ? { virtual: { draws: args.draws, hop_ms: CLOSED_LOOP_DELAYS.hopMs, pre_route_hop_ms: CLOSED_LOOP_DELAYS.preRouteHopMs, ms_per_mb: CLOSED_LOOP_DELAYS.msPerMb } } : {}),
    runs: [],
  };
  const points: (FeedbackPoint & { draw?: number })[] = args.virtual ? plan(args).flatMap((p) => Array.from({ length: args.draws }, (_, d) => ({ ...p, draw: d + 1 }))) : plan(args);
  const started = Date.now();
  for (const [i, p] of points.entries()) {
    const run = p.draw !== undefined ? runVirtual(p, p.draw) : await runPoint(p);
    results.runs.push(run);
    if (!args.virtual || i === points.length - 1) write(args.out, results);
    const t = run.ttft_ms;
    const kv = run.learned.kv_capacity_blocks.join("/");
    console.log(
      `[${i + 1}/${points.length} ${((Date.now() - started) / 1000).toFixed(0)}s] ${p.sessions}s seed${p.seed} ${p.config.name.padEnd(12)} feedback ${run.feedback.padEnd(3)} ` +
        `kv_hit ${run.kv_hit?.toFixed(3)} ttft p50 ${t.p50?.toFixed(0)} p95 ${t.p95?.toFixed(0)} ms  errors ${run.errors}/${run.requests}  learned kv ${kv}`,
    );
  }
}

await runCli("bench:routing-feedback", main);
