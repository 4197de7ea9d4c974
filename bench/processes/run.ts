/**
 * `npm run bench:processes [-- --processes N --requests N --prompt-kb K --baseline DIR --no-write]`
 *
 * What a warm gateway costs per request, process by process. Each of `--processes` rounds starts
 * kvgate afresh in a workerd of its own (and, with --baseline, the gateway bundled from another
 * checkout, in turn), in front of the zero-latency simulated fleet, and sends it `--requests`
 * streamed chat requests one after another, each a system prompt and a question of its own. The
 * first half, with a `--prompt-kb` KB prompt, warms V8 up; over the second, with that prompt and a
 * 1 KB one in blocks of 50 of each in turn, the workerd process's CPU time per request of each
 * size, and their ratio. V8 optimises each process on its own, and code it gave up optimising
 * stays slow for the process's life: a benchmark that starts one process per target reads that as
 * noise, or as the target. The ratio is the figure a process is judged by: what hashing the longer
 * prompt costs beside the rest of the request, measured in the same seconds, so the machine's own
 * drift cancels. Writes bench/results/processes.{json,md}.
 */
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { parseFlags, positiveInt, UsageError } from "../harness/argv.ts";
import { commitOf } from "../harness/commit.ts";
import { cpuSince, servedBy } from "../harness/process-cpu.ts";
import { startFleetProcess } from "../overhead/fleet-process.ts";
import { machineInfo } from "../overhead/machine.ts";
import { median } from "../stats/quantiles.ts";
import { kvgateTarget, SIM_MODEL } from "../overhead/targets.ts";
import { renderProcesses, summarise, type ProcessRun, type ProcessesReport } from "./report.ts";
import { runCli } from "../harness/cli.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const RESULTS = resolve(ROOT, "bench", "results");

/** Requests of one prompt size in a row while measuring: /proc counts CPU in 10 ms ticks, so a block is ~100 ms of it. */
const BLOCK = 50;

const { flags, processes, requests, promptKb, baseline } = await runCli("bench:processes", () => {
  const flags = parseFlags(
    process.argv.slice(2),
    {
      processes: { type: "string", default: "30" },
      requests: { type: "string", default: "800" },
      "prompt-kb": { type: "string", default: "21" },
      baseline: { type: "string" },
      "no-write": { type: "boolean", default: false },
    },
    "--processes N --requests N --prompt-kb K --baseline DIR --no-write",
  );
  const requests = positiveInt("--requests", flags.requests);
  if (requests < 4 * BLOCK) throw new UsageError(`--requests takes at least ${4 * BLOCK} (half warm V8 up, the other half is measured in blocks of ${BLOCK} of each prompt), not "${requests}"`);
  return {
    flags,
    processes: positiveInt("--processes", flags.processes),
    requests,
    promptKb: positiveInt("--prompt-kb", flags["prompt-kb"]),
    baseline: flags.baseline === undefined ? null : resolve(flags.baseline),
  };
});

/** The gateway of this checkout, and of --baseline's as `kvgate@<its commit>`. */
const targets: { name: string; root: string | undefined }[] = [{ name: "kvgate", root: undefined }];
if (baseline) targets.push({ name: `kvgate@${commitOf(baseline)}`, root: baseline });

const SHORT_KB = 1;
const SENTENCE = "You are a careful assistant. Answer from the documents given, and cite them. ";
const systemPrompt = (kb: number): string => SENTENCE.repeat(Math.ceil((kb * 1024) / SENTENCE.length)).slice(0, kb * 1024);
const LONG = systemPrompt(promptKb);
const SHORT = systemPrompt(SHORT_KB);

/** One fresh process of `target`: its workerd CPU per request of each prompt size over the measured half, and the long prompt's median time to first byte there. */
async function measure(target: (typeof targets)[number], round: number, fleet: string[]): Promise<ProcessRun> {
  const { served, pid } = await servedBy(() => kvgateTarget("kvgate", fleet, target.root ? { root: target.root } : {}));
  try {
    if (pid === null) throw new Error(`cannot tell which workerd serves ${target.name} (this benchmark reads /proc, Linux only)`);
    const send = async (system: string, i: number): Promise<number> => {
      const body = JSON.stringify({ model: SIM_MODEL, stream: true, max_tokens: 4, messages: [{ role: "system", content: system }, { role: "user", content: `Question ${round}.${i}: what does document ${i % 97} say?` }] });
      const t0 = performance.now();
      const res = await fetch(`${served.url}/v1/chat/completions`, { method: "POST", headers: { ...served.headers, "content-type": "application/json" }, body });
      if (res.status !== 200 || !res.body) throw new Error(`${target.name} answered ${res.status}: ${await res.text()}`);
      const reader = res.body.getReader();
      await reader.read();
      const ttfb = performance.now() - t0;
      while (!(await reader.read()).done) {}
      return ttfb;
    };
    const warm = Math.floor(requests / 2);
    // The long prompt alone first, as a gateway whose traffic has long prompts starts: the first half's work is where V8 settles.
    for (let i = 0; i < warm; i++) await send(LONG, i);
    const cpuMs = { long: 0, short: 0 };
    const sent = { long: 0, short: 0 };
    const ttfb: number[] = [];
    for (let i = warm; i < requests; ) {
      const kind = Math.floor((i - warm) / BLOCK) % 2 === 0 ? "long" : "short";
      const n = Math.min(BLOCK, requests - i);
      const cpu = cpuSince(pid);
      for (let k = 0; k < n; k++, i++) {
        const t = await send(kind === "long" ? LONG : SHORT, i);
        if (kind === "long") ttfb.push(t);
      }
      cpuMs[kind] += cpu();
      sent[kind] += n;
    }
    const long = Math.round((cpuMs.long * 1000) / sent.long);
    const short = Math.round((cpuMs.short * 1000) / sent.short);
    return { target: target.name, process: round, cpu_us_per_request: long, short_cpu_us_per_request: short, long_over_short: Math.round((long / short) * 1000) / 1000, ttfb_ms_p50: Math.round((median(ttfb) as number) * 100) / 100 };
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
      log(`process ${round}/${processes} ${target.name.padEnd(16)} ${String(run.cpu_us_per_request).padStart(6)} µs CPU/req at ${promptKb} KB, ${String(run.short_cpu_us_per_request).padStart(6)} at ${SHORT_KB} KB (× ${run.long_over_short}), TTFB p50 ${run.ttfb_ms_p50} ms`);
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
  short_prompt_kb: SHORT_KB,
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
