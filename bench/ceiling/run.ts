/**
 * `npm run bench:ceiling [-- --repeats N --seconds S --baseline DIR... --no-write]`
 *
 * What the Workers runtime charges for the work a routing gateway cannot skip, on the same
 * zero-latency fleet as bench:overhead, non-streaming at c=50:
 *   floor             a Worker that passes the request through (bench:overhead's floor)
 *   floor-via-entry   the same behind Miniflare's entry Worker: what serving benchmarks on
 *                     Miniflare's own address (before direct sockets) added to every target
 *   floor+route       the same plus one Durable Object RPC per request, to a toy router that
 *                     answers a fixed pick: the routing round-trip and nothing of kvgate's
 *   floor+body+route  the same plus reading the JSON body and sending it on re-serialised:
 *                     the least any prefix-routing gateway does
 *   kvgate            the gateway, no hooks, as bench:overhead runs it
 * Per target: req/s and the workerd process's CPU time per request (a more direct measure of
 * what a target costs than req/s when the load generator shares the cores). Targets alternate
 * within each repeat; the medians are reported. Writes bench/results/ceiling.{json,md}.
 *
 * --baseline DIR adds kvgate as bundled from another checkout (a git worktree of an earlier
 * commit, with its dependencies installed or node_modules linked), for an interleaved A/B of two
 * commits in one run: `kvgate@<its short commit>`. Given several times, it measures each, which
 * bisects a cost across commits in one run.
 */
import { writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { walkArgs } from "../harness/argv.ts";
import { commitOf } from "../harness/commit.ts";
import { startFloor, startScriptWorker, type ServedWorker } from "../harness/gateway.ts";
import { chatBodies } from "../overhead/bodies.ts";
import { startFleetProcess } from "../overhead/fleet-process.ts";
import { machineInfo } from "../overhead/machine.ts";
import { runNonStreamLoad } from "../overhead/nonstream-load.ts";
import { ascending, percentile, round as roundFigure } from "../overhead/stats.ts";
import { COMPLETIONS_PATH, floorTarget, kvgateTarget, SIM_MODEL } from "../overhead/targets.ts";
import { cpuMs, newWorkerd, workerdPids } from "./process-cpu.ts";

const RESULTS = resolve(import.meta.dirname, "..", "results");

const CONCURRENCY = 50;
const BASE_TARGETS = ["floor", "floor-via-entry", "floor+route", "floor+body+route", "kvgate"] as const;
type Name = (typeof BASE_TARGETS)[number] | `kvgate@${string}`;

const args: { repeats: number; seconds: number; write: boolean; baselines: string[] } = { repeats: 6, seconds: 3, write: true, baselines: [] };
walkArgs(process.argv.slice(2), "--repeats N --seconds S --baseline DIR --no-write", (flag, value) => {
  if (flag === "--repeats") args.repeats = positive(flag, value(), true);
  else if (flag === "--seconds") args.seconds = positive(flag, value(), false);
  else if (flag === "--baseline") args.baselines.push(resolve(value()));
  else if (flag === "--no-write") args.write = false;
  else return false;
  return true;
});

/** `kvgate@<commit>` → the checkout it is bundled from (--baseline, which may be given several times). */
const baselineDirs = new Map(args.baselines.map((dir) => [`kvgate@${commitOf(dir)}` as const, dir]));

function positive(flag: string, text: string, integer: boolean): number {
  const n = Number(text);
  if (!(n > 0) || (integer && !Number.isInteger(n))) throw new Error(`${flag} needs a positive ${integer ? "integer" : "number"}, not "${text}"`);
  return n;
}

/** A router that answers every ask with the same pick: the RPC's cost, none of the routing. */
const TOY_ROUTER = `import { DurableObject } from "cloudflare:workers";
export class ToyRouter extends DurableObject {
  seq = 0;
  route(group, chain, released, exclude) {
    return { backend: 0, backendId: "sim-0", lease: "l" + ++this.seq, reason: "prefix-hit", matched: chain.length - 1, total: chain.length, routedAt: Date.now() };
  }
}`;
const CHAIN = "[1, 2, 3, 4, 5, 6, 7, 8]";

function floorRoute(upstream: string): string {
  return `${TOY_ROUTER}
export default {
  async fetch(req, env) {
    const u = new URL(req.url);
    await env.ROUTER.getByName("g").route("g", ${CHAIN}, [], []);
    const up = await fetch(${JSON.stringify(upstream)} + u.pathname, { method: req.method, headers: req.headers, body: req.body });
    return new Response(up.body, up);
  },
};`;
}

function floorBodyRoute(upstream: string): string {
  return `${TOY_ROUTER}
const utf8 = new TextDecoder("utf-8", { fatal: true });
export default {
  async fetch(req, env) {
    const u = new URL(req.url);
    const body = JSON.parse(utf8.decode(await req.arrayBuffer()));
    await env.ROUTER.getByName("g").route("g", ${CHAIN}, [], []);
    const up = await fetch(${JSON.stringify(upstream)} + u.pathname, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return new Response(up.body, { status: up.status, headers: { "content-type": up.headers.get("content-type") ?? "application/json" } });
  },
};`;
}

interface Running {
  name: Name;
  url: string;
  /** What the target needs on each request (kvgate's key). */
  headers: Record<string, string>;
  pid: number;
  stop(): Promise<void>;
}

interface Run {
  target: Name;
  repeat: number;
  rps: number;
  cpu_us_per_request: number;
  errors: number;
}

async function start(name: Name, fleet: string[]): Promise<Running> {
  const before = workerdPids();
  const upstream = fleet[0] as string;
  const worker = (w: ServedWorker) => ({ url: w.url, headers: {}, stop: () => w.dispose() });
  let served: { url: string; headers: Record<string, string>; stop(): Promise<void> };
  if (name === "floor") served = await floorTarget(upstream);
  else if (name === "kvgate") served = await kvgateTarget("kvgate", fleet);
  else if (name.startsWith("kvgate@")) served = await kvgateTarget("kvgate", fleet, baselineDirs.get(name as `kvgate@${string}`) as string);
  else if (name === "floor-via-entry") served = worker(await startFloor(upstream, true));
  else served = worker(await startScriptWorker(name === "floor+route" ? floorRoute(upstream) : floorBodyRoute(upstream), { ROUTER: "ToyRouter" }));
  const pid = newWorkerd(before);
  if (pid === null) throw new Error(`cannot tell which workerd serves ${name} (this benchmark reads /proc, Linux only)`);
  return { name, url: served.url, headers: served.headers, pid, stop: () => served.stop() };
}

const bodies = chatBodies({ model: SIM_MODEL, stream: false, maxTokens: 16 });

async function load(t: Running, seconds: number): Promise<Omit<Run, "repeat">> {
  const cpuBefore = cpuMs(t.pid);
  const r = await runNonStreamLoad({ url: t.url + COMPLETIONS_PATH, headers: t.headers, bodies, connections: CONCURRENCY, durationMs: seconds * 1000, maxRequests: 1_000_000 });
  const cpu = cpuMs(t.pid) - cpuBefore;
  return { target: t.name, rps: round(r.completed / (r.elapsedMs / 1000)), cpu_us_per_request: round((cpu * 1000) / Math.max(1, r.completed)), errors: r.errors };
}

/** The overhead report's rounding, for a figure that is always finite here. */
function round(x: number): number {
  return roundFigure(x) as number;
}

function median(values: readonly number[]): number {
  return percentile(ascending(values), 50) as number;
}

const TARGETS: Name[] = [...BASE_TARGETS];
for (const [name] of baselineDirs) TARGETS.push(name);
const startedAt = performance.now();
const log = (line: string): void => console.error(`[${((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)} s] ${line}`);
const fleet = await startFleetProcess(2);
const running: Running[] = [];
const runs: Run[] = [];
try {
  for (const name of TARGETS) running.push(await start(name, fleet.urls));
  for (const t of running) await load(t, 1.5);
  for (let repeat = 1; repeat <= args.repeats; repeat++) {
    const order = repeat % 2 === 1 ? running : [...running].reverse();
    for (const t of order) {
      const run = { ...(await load(t, args.seconds)), repeat };
      runs.push(run);
      log(`rep ${repeat}/${args.repeats} ${t.name.padEnd(17)} ${String(run.rps).padStart(7)} req/s ${String(run.cpu_us_per_request).padStart(7)} µs CPU/req${run.errors ? `  ERRORS ${run.errors}` : ""}`);
    }
  }
} finally {
  for (const t of running) await t.stop();
  await fleet.stop();
}

const floorOf = (pick: (r: Run) => number) => median(runs.filter((r) => r.target === "floor").map(pick));
const medians = TARGETS.map((target) => {
  const mine = runs.filter((r) => r.target === target);
  const rps = median(mine.map((r) => r.rps));
  const cpu = median(mine.map((r) => r.cpu_us_per_request));
  return { target, rps, rps_vs_floor: round(rps / floorOf((r) => r.rps)), cpu_us_per_request: cpu, cpu_vs_floor: round(cpu / floorOf((r) => r.cpu_us_per_request)), errors: mine.reduce((n, r) => n + r.errors, 0) };
});


const DOES: Record<(typeof BASE_TARGETS)[number], string> = {
  floor: "passes the request through",
  "floor-via-entry": "the same, behind Miniflare's entry Worker (a dev-tool hop)",
  "floor+route": "+ one Durable Object RPC (toy router)",
  "floor+body+route": "+ reads and re-serialises the JSON body",
  kvgate: "validates, fingerprints, routes, streams back",
};
const does = (t: Name): string => (t.startsWith("kvgate@") ? `kvgate as of ${t.slice("kvgate@".length)} (--baseline)` : DOES[t as keyof typeof DOES]);

const report = { generated_at: new Date().toISOString(), machine: machineInfo(), concurrency: CONCURRENCY, seconds: args.seconds, repeats: args.repeats, medians, runs };
const md = [
  "# What the runtime charges a routing gateway",
  "",
  "Non-streaming chat completions at c=50 against the zero-latency simulated fleet, each target in its own",
  "workerd (Miniflare), alternating within each repeat. CPU is the workerd process's user + system time",
  "per completed request; the ratios compare medians of the same run.",
  "",
  "```sh",
  "npm run bench:ceiling",
  "```",
  "",
  `${report.generated_at} · kvgate ${commitOf(resolve(import.meta.dirname, "..", ".."))} · ${report.machine.cpu}, ${report.machine.cores} cores (shared) · Node ${report.machine.node} · median of ${args.repeats} × ${args.seconds} s`,
  "",
  "| target | what it does per request | req/s | × floor | CPU µs/req | × floor |",
  "| --- | --- | --- | --- | --- | --- |",
  ...medians.map((m) => `| ${m.target} | ${does(m.target)} | ${m.rps} | ${m.rps_vs_floor} | ${m.cpu_us_per_request} | ${m.cpu_vs_floor} |`),
  "",
  "floor+body+route is the least a prefix-routing gateway on Workers can do: it has to read the prompt",
  "to hash it, and has to ask the group's Durable Object. Its ratio to the floor bounds what kvgate's",
  "ratio can reach on this runtime and machine; kvgate's distance from it is kvgate's own work.",
  "",
].join("\n");

if (args.write) {
  await writeFile(join(RESULTS, "ceiling.json"), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(join(RESULTS, "ceiling.md"), md);
  log("wrote bench/results/ceiling.json and ceiling.md");
} else {
  console.log(md);
}
