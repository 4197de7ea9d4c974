/**
 * npm run bench:routing [-- --quick] [--seeds 3] [--regime roomy,pressured] [--trace multi-turn,...]
 *                       [--strategy prefix-aware,...] [--sessions 8,16] [--out DIR] [--report-only]
 *
 * Replays seeded session traces through kvgate (served by Miniflare, one Durable Object per run)
 * in front of a fresh simulated fleet of 4 GPU workers (empty caches) for every strategy, regime,
 * trace, concurrency and seed. Writes bench/results/routing.json, routing.md and routing.svg.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { PRESETS, startFleet } from "../fleet/index.ts";
import { startGateway } from "../harness/gateway.ts";
import { replay, summarize } from "../replay/index.ts";
import { generateTrace, traceFootprint } from "../traces/index.ts";
import { renderChart } from "./chart.ts";
import { REGIMES, points, type Point } from "./matrix.ts";
import { renderReport } from "./report.ts";
import type { RoutingResults, RoutingRun } from "./types.ts";

const DEFAULT_RESULTS = resolve(import.meta.dirname, "..", "results");
let RESULTS = DEFAULT_RESULTS;
const MODEL = "kvgate-sim";

function parseArgs(argv: string[]) {
  const list = (flag: string) => {
    const i = argv.indexOf(flag);
    return i >= 0 ? (argv[i + 1] ?? "").split(",").filter(Boolean) : undefined;
  };
  const seedsAt = argv.indexOf("--seeds");
  const outAt = argv.indexOf("--out");
  return {
    out: outAt >= 0 ? resolve(argv[outAt + 1] ?? DEFAULT_RESULTS) : DEFAULT_RESULTS,
    quick: argv.includes("--quick"),
    reportOnly: argv.includes("--report-only"),
    seeds: seedsAt >= 0 ? Number(argv[seedsAt + 1]) : 3,
    regimes: list("--regime"),
    traces: list("--trace"),
    strategies: list("--strategy"),
    sessions: list("--sessions")?.map(Number),
  };
}

async function runPoint(p: Point): Promise<{ run: RoutingRun; errorSamples: RoutingResults["error_samples"] }> {
  const trace = generateTrace(p.trace, { ...p.regime.trace[p.trace], sessions: p.sessions, seed: p.seed, ...(p.turns ? { turns: p.turns } : {}) });
  const fleet = await startFleet({ workers: 4, basePort: 0, preset: p.regime.preset, timeScale: p.regime.timeScale, servedModelName: MODEL });
  try {
    const gateway = await startGateway({
      config: {
        modelGroups: [
          {
            name: MODEL,
            strategy: p.strategy,
            // An operator knows each server's KV capacity (vLLM logs its GPU blocks) and prefill
            // rate; the hints are those, the rate at the regime's time scale. Every other routing
            // parameter is the default.
            deployments: fleet.urls.map((baseUrl, i) => ({
              id: `gpu-${i}`,
              baseUrl,
              model: MODEL,
              kvCapacityBlocks: PRESETS[p.regime.preset].kvCapacityBlocks,
              prefillTokensPerSec: Math.round(1000 / (PRESETS[p.regime.preset].prefillMsPerToken * p.regime.timeScale)),
            })),
          },
        ],
      },
    });
    try {
      const result = await replay(trace, { baseUrl: gateway.url, apiKey: gateway.key, model: MODEL, timeoutMs: 300_000 });
      const s = summarize(result);
      const run = { regime: p.regime.name, trace: p.trace, strategy: p.strategy, sessions: p.sessions, seed: p.seed, ...s };
      // A few failures of each run, verbatim: an error count alone says nothing about its cause.
      const errorSamples = result.requests
        .filter((r) => r.error !== null)
        .slice(0, 3)
        .map((r) => ({ regime: run.regime, trace: run.trace, strategy: run.strategy, sessions: run.sessions, seed: run.seed, status: r.status, error: r.error ?? "" }));
      return { run, errorSamples };
    } finally {
      await gateway.dispose();
    }
  } finally {
    await fleet.close();
  }
}

/**
 * The most any routing could reach: the same trace against one worker with an unbounded cache
 * and no latency, which sees every request. Cold first turns and each turn's new text stay misses.
 */
async function ceiling(p: Point): Promise<number | null> {
  const trace = generateTrace(p.trace, { ...p.regime.trace[p.trace], sessions: p.sessions, seed: p.seed, ...(p.turns ? { turns: p.turns } : {}) });
  const fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant", kvCapacityBlocks: 1 << 22, servedModelName: MODEL });
  try {
    return summarize(await replay(trace, { baseUrl: fleet.urls[0] as string, model: MODEL })).kv_hit;
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
  const args = parseArgs(process.argv.slice(2));
  RESULTS = args.out;
  if (args.reportOnly) {
    write(JSON.parse(readFileSync(join(RESULTS, "routing.json"), "utf8")) as RoutingResults);
    return;
  }
  const plan = points(args);
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
    runs: [],
  };
  const started = Date.now();
  for (const [i, p] of plan.entries()) {
    if (!results.ceilings.some((c) => c.regime === p.regime.name && c.trace === p.trace && c.sessions === p.sessions && c.seed === p.seed)) {
      results.ceilings.push({ regime: p.regime.name, trace: p.trace, sessions: p.sessions, seed: p.seed, kv_hit: await ceiling(p) });
    }
    const { run, errorSamples } = await runPoint(p);
    results.runs.push(run);
    results.error_samples.push(...errorSamples);
    write(results);
    const t = run.ttft_ms;
    console.log(
      `[${i + 1}/${plan.length} ${((Date.now() - started) / 1000).toFixed(0)}s] ${p.regime.name} ${p.trace} ${p.sessions}s seed${p.seed} ${p.strategy.padEnd(13)} ` +
        `kv_hit ${run.kv_hit?.toFixed(3)} ttft p50 ${t.p50?.toFixed(0)} p95 ${t.p95?.toFixed(0)} ms  errors ${run.errors}/${run.requests}`,
    );
  }
}

await main();
