/**
 * `npm run bench:ceiling [-- --repeats N --seconds S --baseline DIR... --stream N... --client-usage --no-write]`
 *
 * What the Workers runtime charges for the work a routing gateway cannot skip, on the same
 * zero-latency fleet as bench:overhead, non-streaming at c=50:
 *   floor             a Worker that passes the request through (bench:overhead's floor)
 *   floor+pipe        the same, relaying the body through a stream natively piped, as kvgate does
 *   floor+ttft        the same, reading the first chunk in JavaScript first (kvgate's TTFT timing)
 *   floor-via-entry   the same behind Miniflare's entry Worker: what serving benchmarks on
 *                     Miniflare's own address (before direct sockets) added to every target
 *   floor+route       the same plus one Durable Object RPC per request, to a toy router that
 *                     answers a fixed pick: the routing round-trip and nothing of kvgate's
 *   floor+body+route  the same plus reading the JSON body and sending it on re-serialised:
 *                     the least any prefix-routing gateway does
 *   kvgate            the gateway, no hooks, as bench:overhead runs it
 *   kvgate-nolog      the same with request lines off (what logging costs: feature-cost.ts)
 *   kvgate-key-nousage  the same with a virtual key: its check and rpm / in-flight limits only
 *   kvgate-key        the same with a virtual key (every limit checked, usage read and recorded)
 * Per target: req/s and the workerd process's CPU time per request (a more direct measure of
 * what a target costs than req/s when the load generator shares the cores). Targets alternate
 * within each repeat; the medians are reported. Writes bench/results/ceiling.{json,md}.
 *
 * --stream N measures streamed answers of N chunks instead, for the floor and the kvgate
 * targets (kvgate-restamp among them); `--stream 1 --stream 100` gives what a virtual key adds
 * per chunk (key-cost.ts).
 *
 * --baseline DIR adds kvgate as bundled from another checkout (a git worktree of an earlier
 * commit, with its dependencies installed or node_modules linked), for an interleaved A/B of two
 * commits in one run: `kvgate@<its short commit>`. Given several times, it measures each, which
 * bisects a cost across commits in one run.
 */
import { resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { commitOf } from "../harness/commit.ts";
import { chatBodies } from "../overhead/bodies.ts";
import { startFleetProcess } from "../overhead/fleet-process.ts";
import { machineInfo } from "../overhead/machine.ts";
import { round as roundFigure } from "../stats/round.ts";
import { NONSTREAM_TOKENS, runCompletionsLoad } from "../overhead/completions-load.ts";
import { SIM_MODEL } from "../overhead/targets.ts";
import { UsageError } from "../harness/argv.ts";
import { parseCeilingArgs } from "./args.ts";
import type { CeilingRun } from "./key-cost.ts";
import { cpuSince } from "../harness/process-cpu.ts";
import { routePayload } from "./route-payload.ts";
import { merge, mediansOf, renderMarkdown, streamedSection, write, type CeilingReport } from "./report.ts";
import { BASE_TARGETS, startTarget, STREAM_TARGETS, type Name, type Running } from "./targets.ts";
import { runCli } from "../harness/cli.ts";

const CONCURRENCY = 50;
const WARM_SECONDS = 1.5;

const { args, KIND_TARGETS } = await runCli("bench:ceiling", () => {
  const args = parseCeilingArgs(process.argv.slice(2));
  const KIND_TARGETS: readonly Name[] = args.stream.length > 0 ? STREAM_TARGETS : BASE_TARGETS;
  for (const t of args.targets) if (!KIND_TARGETS.includes(t as Name)) throw new UsageError(`--target: "${t}" is not one of ${KIND_TARGETS.join(", ")}`);
  return { args, KIND_TARGETS };
});
const streamed = args.stream.length > 0;
/** `kvgate@<commit>` → the checkout it is bundled from (--baseline, which may be given several times). */
const baselineDirs = new Map(args.baselines.map((dir) => [`kvgate@${commitOf(dir)}`, dir]));
const TARGETS: Name[] = args.targets.length > 0 ? KIND_TARGETS.filter((t) => args.targets.includes(t)) : [...KIND_TARGETS];
for (const [name] of baselineDirs) TARGETS.push(name as Name);
/** What each measurement sends: non-streamed, or streamed with each length asked for. */
const loads: { chunks: number | undefined }[] = streamed ? args.stream.map((chunks) => ({ chunks })) : [{ chunks: undefined }];

/** The overhead report's rounding, for a figure that is always finite here. */
function round(x: number): number {
  return roundFigure(x) as number;
}

async function load(t: Running, l: (typeof loads)[number], seconds: number): Promise<Omit<CeilingRun, "repeat">> {
  const workerCpu = cpuSince(t.pid);
  const objectCpu = t.objectPid === undefined ? null : cpuSince(t.objectPid);
  const r = await runCompletionsLoad({ url: t.url, headers: t.headers, model: t.model, chunks: l.chunks ?? null, includeUsage: args.clientUsage, connections: CONCURRENCY, durationMs: seconds * 1000, maxRequests: 1_000_000 });
  const worker = workerCpu();
  const object = objectCpu === null ? 0 : objectCpu();
  const cpu = worker + object;
  const perRequest = (ms: number): number => round((ms * 1000) / Math.max(1, r.completed));
  return {
    target: t.name,
    ...(l.chunks === undefined ? {} : { chunks: l.chunks }),
    rps: round(r.completed / (r.elapsedMs / 1000)),
    cpu_us_per_request: perRequest(cpu),
    ...(t.objectPid === undefined ? {} : { cpu_split_us_per_request: { worker: perRequest(worker), object: perRequest(object) } }),
    errors: r.errors,
  };
}

const startedAt = performance.now();
const log = (line: string): void => console.error(`[${((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)} s] ${line}`);
const fleet = await startFleetProcess(2);
const running: Running[] = [];
const runs: CeilingRun[] = [];
try {
  for (const name of TARGETS) running.push(await startTarget(name, fleet.urls, baselineDirs));
  for (const t of running) {
    for (const l of loads) await load(t, l, WARM_SECONDS);
    if (t.confirm) log(`${t.name}: ${await t.confirm()}`);
  }
  for (let repeat = 1; repeat <= args.repeats; repeat++) {
    const order = repeat % 2 === 1 ? running : [...running].reverse();
    for (const l of loads) {
      const measured: Omit<CeilingRun, "repeat">[] = [];
      if (args.together) measured.push(...(await Promise.all(order.map((t) => load(t, l, args.seconds)))));
      else for (const t of order) measured.push(await load(t, l, args.seconds));
      for (const m of measured) {
        const run = { ...m, repeat };
        runs.push(run);
        const kind = l.chunks === undefined ? "" : ` ${l.chunks}ch`;
        log(`rep ${repeat}/${args.repeats} ${run.target.padEnd(17)}${kind.padEnd(6)} ${String(run.rps).padStart(7)} req/s ${String(run.cpu_us_per_request).padStart(7)} µs CPU/req${run.errors ? `  ERRORS ${run.errors}` : ""}`);
      }
    }
  }
} finally {
  for (const t of running) await t.stop();
  await fleet.stop();
}

const part = {
  generated_at: new Date().toISOString(),
  commit: commitOf(resolve(import.meta.dirname, "..", "..")),
  command: `npm run bench:ceiling${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
  concurrency: CONCURRENCY,
  seconds: args.seconds,
  repeats: args.repeats,
};
const machine = machineInfo();
const report = streamed
  ? await merge({ streamed: streamedSection({ ...part, medians: args.stream.flatMap((c) => mediansOf(runs, TARGETS, c)), runs }, args.clientUsage, args.stream, TARGETS), machine })
  : await merge({ main: { ...part, machine, medians: mediansOf(runs, TARGETS), runs, route_payload: routePayload(chatBodies({ model: SIM_MODEL, stream: false, maxTokens: NONSTREAM_TOKENS })[0] as string) } satisfies CeilingReport });
if (args.write) {
  await write(report);
  log("wrote bench/results/ceiling.json and ceiling.md");
} else {
  console.log(renderMarkdown(report));
}
