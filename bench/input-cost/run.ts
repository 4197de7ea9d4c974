/**
 * `npm run bench:input [-- --repeats N --requests N --baseline DIR --only a,b --no-write]`
 *
 * The most one request can cost kvgate's Worker within the body limit. Each body of bodies.ts
 * (the most of one thing a request may hold, or one step past a bound) goes to the bundled
 * gateway in its own workerd, `--requests` times one after another, in front of the simulated
 * fleet; the workerd process's CPU time (user + system, from /proc) over those requests, divided
 * by their number, is the body's cost. Repeated `--repeats` times; medians and the spread are
 * reported. Beside it, each stage of the request path on the same body, timed in Node.
 *
 * --baseline DIR adds the gateway bundled from another checkout (e.g. the commit before the
 * bounds), for the same bodies in the same run. Writes bench/results/input-cost.{json,md}.
 */
import { writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { randomBytes } from "node:crypto";
import { parseFlags, positiveInt } from "../harness/argv.ts";
import { commitOf } from "../harness/commit.ts";
import { startGateway } from "../harness/gateway.ts";
import { cpuMs, newWorkerd, workerdPids } from "../harness/process-cpu.ts";
import { startFleetProcess } from "../overhead/fleet-process.ts";
import { machineInfo, toolVersions } from "../overhead/machine.ts";
import { SIM_MODEL } from "../overhead/targets.ts";
import { inputShapes, type InputShape } from "./bodies.ts";
import { stageTimes, type StageTimes } from "./pieces.ts";
import { reportMarkdown, summarise, type Answer, type Run } from "./report.ts";
import { runCli } from "../harness/cli.ts";

const RESULTS = resolve(import.meta.dirname, "..", "results");

const args = await runCli("bench:input", () => {
  const flags = parseFlags(
    process.argv.slice(2),
    {
      repeats: { type: "string", default: "3" },
      requests: { type: "string", default: "8" },
      baseline: { type: "string" },
      only: { type: "string" },
      "no-write": { type: "boolean", default: false },
    },
    "--repeats N --requests N --baseline DIR --only a,b --no-write",
  );
  return {
    repeats: positiveInt("--repeats", flags.repeats),
    requests: positiveInt("--requests", flags.requests),
    baseline: flags.baseline === undefined ? null : resolve(flags.baseline),
    only: flags.only?.split(",") ?? null,
    write: !flags["no-write"],
  };
});

interface Target {
  name: string;
  url: string;
  pid: number;
  key: string;
  stop(): Promise<void>;
}

/** kvgate with the default limits, its one group over the fleet, in a workerd of its own. */
async function start(name: string, fleet: string[], root?: string): Promise<Target> {
  const before = workerdPids();
  const key = `sk-${randomBytes(16).toString("hex")}`;
  const config = { modelGroups: [{ name: SIM_MODEL, deployments: fleet.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: SIM_MODEL })) }] };
  const served = await startGateway({ config, masterKey: key, ...(root ? { root } : {}) });
  const pid = newWorkerd(before);
  if (pid === null) throw new Error(`cannot tell which workerd serves ${name} (this benchmark reads /proc, Linux only)`);
  return { name, url: served.url, pid, key, stop: () => served.dispose() };
}

/** What the gateway answered: the status, and an error's code and param. */
async function answerOf(res: Response): Promise<Answer> {
  const text = await res.text();
  const routed = res.headers.has("x-kvgate-backend");
  if (res.status === 200) return { status: 200, code: null, param: null, routed };
  try {
    const e = (JSON.parse(text) as { error?: { code?: string | null; param?: string | null } }).error;
    return { status: res.status, code: e?.code ?? null, param: e?.param ?? null, routed };
  } catch {
    return { status: res.status, code: null, param: null, routed };
  }
}

async function send(t: Target, shape: InputShape, body: Uint8Array<ArrayBuffer>): Promise<Answer> {
  const res = await fetch(t.url + shape.path, { method: "POST", headers: { authorization: `Bearer ${t.key}`, "content-type": "application/json" }, body });
  return answerOf(res);
}

async function measure(t: Target, shape: InputShape, body: Uint8Array<ArrayBuffer>, repeat: number): Promise<Run> {
  const cpuBefore = cpuMs(t.pid);
  const t0 = performance.now();
  let answer: Answer | null = null;
  for (let i = 0; i < args.requests; i++) answer = await send(t, shape, body);
  const wall = performance.now() - t0;
  const cpu = cpuMs(t.pid) - cpuBefore;
  return { target: t.name, shape: shape.name, repeat, cpu_ms_per_request: cpu / args.requests, wall_ms_per_request: wall / args.requests, answer: answer as Answer };
}

const startedAt = performance.now();
const log = (line: string): void => console.error(`[${((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)} s] ${line}`);
const shapes = inputShapes(SIM_MODEL).filter((s) => !args.only || args.only.includes(s.name));
const encoded = new Map(shapes.map((s): [string, Uint8Array<ArrayBuffer>] => [s.name, new TextEncoder().encode(s.text)]));
const bodyOf = (s: InputShape) => encoded.get(s.name) as Uint8Array<ArrayBuffer>;

log("timing the request path's stages in Node");
const stages: Record<string, StageTimes> = {};
for (const s of shapes) stages[s.name] = stageTimes(s, 5);

const fleet = await startFleetProcess(2);
const targets: Target[] = [];
const runs: Run[] = [];
try {
  targets.push(await start("kvgate", fleet.urls));
  if (args.baseline) targets.push(await start(`kvgate@${commitOf(args.baseline)}`, fleet.urls, args.baseline));
  // Every body once first: the isolate compiles its code paths and the Durable Object starts.
  for (const t of targets) for (const s of shapes) await send(t, s, bodyOf(s));
  for (let repeat = 1; repeat <= args.repeats; repeat++) {
    const order = repeat % 2 === 1 ? targets : [...targets].reverse();
    for (const t of order) {
      for (const s of shapes) {
        const run = await measure(t, s, bodyOf(s), repeat);
        runs.push(run);
        log(`rep ${repeat}/${args.repeats} ${t.name.padEnd(16)} ${s.name.padEnd(15)} ${run.cpu_ms_per_request.toFixed(1).padStart(7)} ms CPU/req  ${run.answer.status} ${run.answer.code ?? ""}`);
      }
    }
  }
} finally {
  for (const t of targets) await t.stop();
  await fleet.stop();
}

const summary = summarise(shapes, targets.map((t) => t.name), runs, stages);
const report = { generated_at: new Date().toISOString(), machine: machineInfo(), versions: toolVersions(), repeats: args.repeats, requests: args.requests, summary, runs };
const md = reportMarkdown(report);
if (args.write) {
  await writeFile(join(RESULTS, "input-cost.json"), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(join(RESULTS, "input-cost.md"), md);
  log("wrote bench/results/input-cost.json and input-cost.md");
} else {
  console.log(md);
}
