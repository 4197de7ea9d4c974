import { writeFileSync } from "node:fs";
import type { ParseArgsOptionsConfig } from "node:util";
import { HelpRequested, numberFlag, parseFlags, positiveInt, UsageError } from "../harness/argv.ts";
import { runCli } from "../harness/cli.ts";
import { KB } from "./options.ts";
import {
  TIMED_KINDS,
  TRACE_DEFAULTS,
  TRACE_KINDS,
  b2bSaasRateScale,
  pooledLruHit,
  generateTrace,
  hitConcentration,
  loadAtSpeed,
  prefixCeiling,
  rateForLoad,
  speedForLoad,
  traceDemand,
  traceFootprint,
  type TimedKind,
  type TraceKind,
  type TraceOptions,
} from "./index.ts";
import { BLOCK_TOKENS } from "../fleet/presets.ts";
import { shardCeiling } from "./shard-ceiling.ts";
import { TIMED_FLAGS, fleetFromFlags, number, timedTraceFromFlags } from "./timed-flags.ts";

/**
 * Generates a trace and prints its size and how long generation took; `--out` writes it as JSON.
 *
 *   node bench/traces/cli.ts multi-turn --sessions 64 --document-kb 16 [--out trace.json]
 *
 * Every field of TRACE_DEFAULTS is a flag, in kebab-case or camelCase.
 *
 * An open-loop trace prints its demand and, for a fleet (default 4 × a100-7b at time scale 1),
 * its load at speed 1 and the speed factor and Poisson rate that give a target load:
 *
 *   node bench/traces/cli.ts mooncake --file conversation --minutes 10 --load 0.8
 *   node bench/traces/cli.ts b2b-saas --preset a100-7b --time-scale 0.2 [--b2b stages=9]
 *
 * `--shards 2,4` adds the ceiling over that many shards, each one infinite cache, each request
 * where the gateway's shard key sends it (shard-ceiling.ts): what the key alone costs.
 */

const KINDS = [...TRACE_KINDS, ...TIMED_KINDS].join("|");
const USAGE = `<${KINDS}> [--option value]... [--out file]`;

/** A TRACE_DEFAULTS field's kebab-case flag: systemKB → system-kb. */
const kebab = (key: string): string => key.replace(/KB$/, "Kb").replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());

/** Every TRACE_DEFAULTS field in kebab-case (--system-kb) and camelCase (--systemKB), and --out. */
const SESSION_FLAGS: ParseArgsOptionsConfig = {
  out: { type: "string" },
  ...Object.fromEntries(Object.keys(TRACE_DEFAULTS).flatMap((key) => [kebab(key), key].map((flag) => [flag, { type: "string" as const }]))),
};

function sessionArgs(argv: readonly string[]): { options: TraceOptions; out: string | undefined } {
  const values = parseFlags(argv, SESSION_FLAGS, USAGE);
  const options: Record<string, number> = {};
  for (const key of Object.keys(TRACE_DEFAULTS)) {
    const flag = values[kebab(key)] === undefined ? key : kebab(key);
    const raw = values[flag];
    if (typeof raw === "string") options[key] = numberFlag(`--${flag}`, raw);
  }
  return { options, out: typeof values.out === "string" ? values.out : undefined };
}

const DESCRIBE_FLAGS = { ...TIMED_FLAGS, shards: { type: "string" } } satisfies ParseArgsOptionsConfig;

function describeTimed(kind: TimedKind, argv: readonly string[]): void {
  const values = parseFlags(argv, DESCRIBE_FLAGS, `${kind} ${Object.keys(DESCRIBE_FLAGS).map((f) => `[--${f} value]`).join(" ")}`);
  const started = performance.now();
  const trace = timedTraceFromFlags(kind, values);
  const loadMs = performance.now() - started;
  const fleet = fleetFromFlags(values);
  const demand = traceDemand(trace);
  const noCache = traceDemand(trace, "none");
  const prompts = trace.requests.map((r) => r.promptTokens);
  const n = Math.max(1, trace.requests.length);
  const round = (x: number, digits = 3): string => (Number.isFinite(x) ? x.toFixed(digits) : String(x));
  console.log(`${kind}: ${trace.requests.length} requests over ${(demand.spanMs / 1000).toFixed(1)} s, built in ${loadMs.toFixed(0)} ms`);
  console.log(`  params: ${JSON.stringify(trace.params)}`);
  console.log(`  prompt tokens mean / max: ${Math.round(prompts.reduce((a, b) => a + b, 0) / n)} / ${Math.max(0, ...prompts)}; output tokens mean ${Math.round(demand.outputTokens / n)}`);
  const ceiling = prefixCeiling(trace);
  console.log(`  kv ceiling (one infinite cache, arrival order): ${round(ceiling.kvHit ?? NaN)}`);
  const fleetTokens = fleet.workers * fleet.profile.kvCapacityBlocks * BLOCK_TOKENS;
  console.log(`  kv_hit of one LRU cache holding the fleet's whole memory (${fleet.workers} x ${fleet.preset}, ${Math.round(fleetTokens / 1000)}k tokens; not a bound): ${round(pooledLruHit(trace, fleetTokens) ?? NaN)}`);
  const tops = [5, 10, 20];
  const shares = hitConcentration(ceiling.perRequest, tops).map((s) => (s === null ? "–" : round(s, 2)));
  console.log(`  the ${tops.join(" / ")} largest hits carry ${shares.join(" / ")} of the ceiling's cached tokens`);
  for (const shards of (values.shards ?? "").split(",").filter(Boolean).map((v) => positiveInt("--shards", v))) {
    const over = shardCeiling(trace, fleet.workers, shards);
    const change = over.kvHit !== null && ceiling.kvHit ? ` (${((over.kvHit / ceiling.kvHit - 1) * 100).toFixed(1)}%)` : "";
    console.log(`  over ${shards} shards of ${fleet.workers} workers, each an infinite cache, requests where the shard key sends them: ${round(over.kvHit ?? NaN, 4)}${change}; requests per shard ${over.requests.join(" / ")}`);
  }
  console.log(`  fleet ${fleet.workers} x ${fleet.preset}, time scale ${fleet.timeScale}: capacity ${round(rateForLoad(demand, fleet, 1), 2)} requests/s with the ceiling's hits, ${round(rateForLoad(noCache, fleet, 1), 2)} with none`);
  console.log(`  load at speed 1: ${round(loadAtSpeed(demand, fleet, 1))} with the ceiling's hits, ${round(loadAtSpeed(noCache, fleet, 1))} with none`);
  const load = number("load", values.load);
  if (load !== undefined) {
    console.log(`  for load ${load}: --speed ${round(speedForLoad(demand, fleet, load))} (${round(speedForLoad(noCache, fleet, load))} if nothing were cached), or --rate ${round(rateForLoad(demand, fleet, load), 2)} Poisson`);
  }
  if (kind === "b2b-saas") {
    console.log(`  rateScale for this fleet: ${round(b2bSaasRateScale(fleet, {}))} (its capacity over the 14.41 requests/s llm-d's fleet served)`);
  }
}

function describeSessions(kind: TraceKind, argv: readonly string[]): void {
  const { options, out } = sessionArgs(argv);
  const started = performance.now();
  const trace = generateTrace(kind, options);
  const generationMs = performance.now() - started;
  // Not part of generation: the footprint renders and hashes every request, as the fleet would.
  const f = traceFootprint(trace);
  const size = (tokens: number): string => `${((tokens * 4) / KB).toFixed(1)} KB (${tokens} tokens)`;
  console.log(`${kind}: ${f.sessions} sessions, ${f.requests} requests, generated in ${generationMs.toFixed(1)} ms`);
  console.log(`  shared blocks:               ${size(f.sharedTokens)}`);
  console.log(`  private blocks per session:  ${size(Math.round(f.privateTokens / Math.max(1, f.sessions)))}`);
  console.log(`  working set (all sessions):  ${size(f.sharedTokens + f.privateTokens)}`);
  console.log(`  prompt mean / max:           ${size(f.meanPromptTokens)} / ${size(f.maxPromptTokens)}`);
  console.log(`  params: ${JSON.stringify(trace.params)}`);
  if (out) writeFileSync(out, JSON.stringify(trace));
}

await runCli(
  "traces",
  () => {
    const [first = "", ...rest] = process.argv.slice(2);
    const timedKind = TIMED_KINDS.find((k) => k === first);
    const sessionKind = TRACE_KINDS.find((k) => k === first);
    if (timedKind) describeTimed(timedKind, rest);
    else if (sessionKind) describeSessions(sessionKind, rest);
    else if (first === "--help" || first === "-h") throw new HelpRequested(USAGE);
    else if (first.startsWith("-")) throw new UsageError(`unknown argument ${first} (${USAGE})`);
    else throw new UsageError(first ? `"${first}" is not a trace kind (${KINDS})` : `name a trace kind (${KINDS})`);
  },
  "node bench/traces/cli.ts",
);
