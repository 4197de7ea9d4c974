/**
 * `npm run bench:profile [-- --target T --seconds S --stream N --concurrency C --interval US --cpuprofile FILE --no-write]`
 *
 * Where kvgate's CPU goes under load: V8's sampling profiler on the gateway's isolate (its Worker
 * and, in the same workerd as bench:ceiling's kvgate target runs them, its routing object),
 * through workerd's inspector, while the benchmarks' chat load runs against it (non-streamed at
 * c=50 by default; --stream N for N-chunk answers, asking for usage). Each sampled function is named by its place in
 * kvgate's sources (the bundle's source map), and the samples are added up per area — the
 * gateway Worker, the routing object, each library, and the runtime's own work (native APIs,
 * garbage collection, workerd outside JavaScript).
 *
 *   --target T       kvgate (default), kvgate-nolog, kvgate-restamp, kvgate-key, or ceiling
 *                    (bench:ceiling's floor+body+route: the least a routing gateway does, to
 *                    profile beside kvgate)
 *   --seconds S      the profiled load's length (10), after 3 s of warm-up
 *   --interval US    sampling interval in µs (100)
 *   --cpuprofile F   also save the raw profile (open it in Chrome DevTools; its frames are the bundle's)
 *   --no-write       print the tables, leave bench/results/ alone
 *
 * Writes bench/results/profile-<target>.json and .md. A sampling profiler costs the isolate some
 * time of its own, so req/s under it is lower than bench:ceiling's; the shares are what it reports.
 */
import { readFile, writeFile } from "node:fs/promises";
import { SourceMap } from "node:module";
import { basename, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { commitOf } from "../harness/commit.ts";
import { intBetween, parseFlags, positiveInt, positiveNumber, UsageError } from "../harness/argv.ts";
import { buildGateway } from "../harness/gateway.ts";
import { startFleetProcess } from "../overhead/fleet-process.ts";
import type { LoadResult } from "../overhead/load-types.ts";
import { runCompletionsLoad } from "../overhead/completions-load.ts";
import { ceilingTarget, kvgateTarget, type Target } from "../overhead/targets.ts";
import { summarise, type Bundle, type CpuProfile } from "./attribute.ts";
import { openUserWorker } from "./inspector.ts";
import { renderProfile, type ProfileReport } from "./report.ts";
import { runCli } from "../harness/cli.ts";

const TARGETS = ["kvgate", "kvgate-nolog", "kvgate-restamp", "kvgate-key", "ceiling"] as const;
type ProfiledTarget = (typeof TARGETS)[number];
const ROOT = resolve(import.meta.dirname, "..", "..");
const RESULTS = resolve(ROOT, "bench", "results");
const WARM_SECONDS = 3;

const { v, target, seconds, chunks, concurrency, intervalUs } = await runCli("bench:profile", () => {
  const v = parseFlags(
    process.argv.slice(2),
    {
      target: { type: "string", default: "kvgate" },
      seconds: { type: "string", default: "10" },
      stream: { type: "string" },
      concurrency: { type: "string", default: "50" },
      interval: { type: "string", default: "100" },
      cpuprofile: { type: "string" },
      "no-write": { type: "boolean", default: false },
    },
    "--target T --seconds S --stream N --concurrency C --interval US --cpuprofile FILE --no-write",
  );
  if (!(TARGETS as readonly string[]).includes(v.target)) throw new UsageError(`--target takes one of ${TARGETS.join(", ")}, not "${v.target}"`);
  return {
    v,
    target: v.target as ProfiledTarget,
    seconds: positiveNumber("--seconds", v.seconds),
    chunks: v.stream === undefined ? null : positiveInt("--stream", v.stream),
    concurrency: intBetween("--concurrency", v.concurrency, 1, 200),
    intervalUs: intBetween("--interval", v.interval, 50, 10_000),
  };
});

const startedAt = performance.now();
const log = (line: string): void => console.error(`[${((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)} s] ${line}`);

const fleet = await startFleetProcess(2);
const script = await buildGateway();
const bundle: Bundle | null = target === "ceiling" ? null : { url: basename(script), map: new SourceMap(JSON.parse(await readFile(`${script}.map`, "utf8"))) };
const t = await start(target);

/** The target with workerd's inspector open: kvgate as bench:overhead runs it, or its ceiling. */
async function start(name: ProfiledTarget): Promise<Target & { inspector: string }> {
  const t = name === "ceiling" ? await ceilingTarget(fleet.urls[0] as string, { inspect: true }) : await kvgateTarget(name, fleet.urls, { inspect: true });
  return { ...t, inspector: t.inspector as string };
}

function load(s: number): Promise<LoadResult> {
  return runCompletionsLoad({ url: t.url, headers: t.headers, model: t.model, chunks, connections: concurrency, durationMs: s * 1000, maxRequests: 1_000_000 });
}

/** The load, warmed up first, with the profiler running through the measured part only. */
async function profiled(): Promise<{ profile: CpuProfile; result: LoadResult }> {
  log(`warm-up ${target}, ${WARM_SECONDS} s`);
  await load(WARM_SECONDS);
  const session = await openUserWorker(t.inspector);
  try {
    await session.send("Profiler.enable");
    await session.send("Profiler.setSamplingInterval", { interval: intervalUs });
    await session.send("Profiler.start");
    log(`profiling ${seconds} s of load`);
    const result = await load(seconds);
    const { profile } = await session.send<{ profile: CpuProfile }>("Profiler.stop");
    return { profile, result };
  } finally {
    session.close();
  }
}

const { profile, result } = await profiled().finally(async () => {
  await t.stop();
  await fleet.stop();
});

if (v.cpuprofile) await writeFile(v.cpuprofile, JSON.stringify(profile));
const summary = summarise(profile, bundle, ROOT);
const report: ProfileReport = {
  generated_at: new Date().toISOString(),
  commit: commitOf(ROOT),
  command: `npm run bench:profile${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
  target,
  mode: chunks === null ? "nonstream" : "stream",
  chunks,
  concurrency,
  seconds,
  sampling_interval_us: intervalUs,
  requests: result.completed,
  errors: result.errors,
  rps_under_profiler: Math.round(result.completed / (result.elapsedMs / 1000)),
  busy_us_per_request: Math.round((summary.busy_ms * 1000) / Math.max(1, result.completed)),
  ...summary,
};
const md = renderProfile(report);
if (v["no-write"]) {
  console.log(md);
} else {
  const name = `profile-${target}`;
  await writeFile(resolve(RESULTS, `${name}.json`), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(resolve(RESULTS, `${name}.md`), md);
  log(`wrote bench/results/${name}.json and ${name}.md`);
}
