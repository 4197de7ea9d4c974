/**
 * `npm run bench:processes [-- --processes N --requests N --prompt-kb K --baseline DIR --no-write]`
 *
 * What a warm gateway costs per request, process by process. Each of `--processes` rounds starts
 * kvgate afresh in a workerd of its own (and, with --baseline, the gateway bundled from another
 * checkout, in turn), in front of the zero-latency simulated fleet, and sends it `--requests`
 * streamed chat requests one after another: a `--prompt-kb` KB system prompt, a question of its
 * own each. The figure is the workerd process's CPU time per request over the second half (the
 * first warms V8 up). V8 optimises each process on its own, and code it gave up optimising stays
 * slow for the process's life: a benchmark that starts one process per target reads that as noise,
 * or as the target. Writes bench/results/processes.{json,md}.
 */
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { parseFlags, positiveInt } from "../harness/argv.ts";
import { commitOf } from "../harness/commit.ts";
import { cpuSince, servedBy } from "../harness/process-cpu.ts";
import { startFleetProcess } from "../overhead/fleet-process.ts";
import { machineInfo } from "../overhead/machine.ts";
import { median } from "../stats/quantiles.ts";
import { kvgateTarget, SIM_MODEL } from "../overhead/targets.ts";
import { renderProcesses, summarise, type ProcessRun, type ProcessesReport } from "./report.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const RESULTS = resolve(ROOT, "bench", "results");

const flags = parseFlags(
  process.argv.slice(2),
  {
    processes: { type: "string", default: "30" },
    requests: { type: "string", default: "400" },
    "prompt-kb": { type: "string", default: "21" },
    baseline: { type: "string" },
    "no-write": { type: "boolean", default: false },
  },
  "--processes N --requests N --prompt-kb K --baseline DIR --no-write",
);
const processes = positiveInt("--processes", flags.processes);
const requests = positiveInt("--requests", flags.requests);
const promptKb = positiveInt("--prompt-kb", flags["prompt-kb"]);
if (requests < 2) throw new Error(`--requests takes at least 2 (half warm V8 up, half are measured), not "${requests}"`);
const baseline = flags.baseline === undefined ? null : resolve(flags.baseline);

/** The gateway of this checkout, and of --baseline's as `kvgate@<its commit>`. */
const targets: { name: string; root: string | undefined }[] = [{ name: "kvgate", root: undefined }];
if (baseline) targets.push({ name: `kvgate@${commitOf(baseline)}`, root: baseline });

const SYSTEM = "You are a careful assistant. Answer from the documents given, and cite them. ".repeat(Math.ceil((promptKb * 1024) / 78)).slice(0, promptKb * 1024);

/** One fresh process of `target`: its workerd CPU per request over the measured half, and its requests' median time to first byte there. */
async function measure(target: (typeof targets)[number], round: number, fleet: string[]): Promise<ProcessRun> {
  const { served, pid } = await servedBy(() => kvgateTarget("kvgate", fleet, target.root ? { root: target.root } : {}));
  try {
    if (pid === null) throw new Error(`cannot tell which workerd serves ${target.name} (this benchmark reads /proc, Linux only)`);
    const warm = Math.floor(requests / 2);
    let cpu: (() => number) | null = null;
    const ttfb: number[] = [];
    for (let i = 0; i < requests; i++) {
      if (i === warm) cpu = cpuSince(pid);
      const body = JSON.stringify({ model: SIM_MODEL, stream: true, max_tokens: 4, messages: [{ role: "system", content: SYSTEM }, { role: "user", content: `Question ${round}.${i}: what does document ${i % 97} say?` }] });
      const t0 = performance.now();
      const res = await fetch(`${served.url}/v1/chat/completions`, { method: "POST", headers: { ...served.headers, "content-type": "application/json" }, body });
      if (res.status !== 200 || !res.body) throw new Error(`${target.name} answered ${res.status}: ${await res.text()}`);
      const reader = res.body.getReader();
      await reader.read();
      if (i >= warm) ttfb.push(performance.now() - t0);
      while (!(await reader.read()).done) {}
    }
    const measured = requests - warm;
    return { target: target.name, process: round, cpu_us_per_request: Math.round(((cpu as () => number)() * 1000) / measured), ttfb_ms_p50: Math.round((median(ttfb) as number) * 100) / 100 };
  } finally {
    await served.stop();
  }
}

const startedAt = performance.now();
const log = (line: string): void => console.error(`[${((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)} s] ${line}`);
const fleet = await startFleetProcess(2);
const runs: ProcessRun[] = [];
try {
  for (let round = 1; round <= processes; round++) {
    // Alternating which goes first, as bench:ceiling alternates its targets.
    for (const target of round % 2 === 1 ? targets : [...targets].reverse()) {
      const run = await measure(target, round, fleet.urls);
      runs.push(run);
      log(`process ${round}/${processes} ${target.name.padEnd(16)} ${String(run.cpu_us_per_request).padStart(6)} µs CPU/req, TTFB p50 ${run.ttfb_ms_p50} ms`);
    }
  }
} finally {
  await fleet.stop();
}

const report: ProcessesReport = {
  generated_at: new Date().toISOString(),
  commit: commitOf(ROOT),
  command: `npm run bench:processes${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
  machine: machineInfo(),
  processes,
  requests,
  prompt_kb: promptKb,
  targets: summarise(runs, targets.map((t) => t.name)),
  runs,
};
const md = renderProcesses(report);
if (flags["no-write"]) console.log(md);
else {
  await writeFile(resolve(RESULTS, "processes.json"), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(resolve(RESULTS, "processes.md"), md);
  log("wrote bench/results/processes.json and processes.md");
}
