/**
 * Writes bench/results/overhead.json ("runs" in issue 4's exact shape, context beside it) and
 * overhead.md (the tables the README links to).
 */
import { mkdir, writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import type { BenchArgs } from "./args.ts";
import type { BundleInfo } from "./bundle.ts";
import { renderChart } from "./chart.ts";
import { evaluate, extraRatios } from "./checks.ts";
import type { MachineInfo } from "./machine.ts";
import type { Measurement } from "./measure.ts";
import { renderMarkdown } from "./report-md.ts";
import { keyOf, roundDistribution, summarise, toRun } from "./summary.ts";
import type { ColdStart } from "./targets.ts";

export interface Report {
  command: string;
  args: BenchArgs;
  machine: MachineInfo;
  date: string;
  bundle: BundleInfo;
  coldStart: { kvgate: ColdStart | null; floor: ColdStart | null };
  fleet: { preset: string; workers: number; process: string };
  versions: Record<string, string>;
  notes: string[];
  measurements: Measurement[];
  elapsedSeconds: number;
}

const RESULTS = resolve(import.meta.dirname, "..", "results");

export async function writeReport(r: Report, write: boolean, log: (line: string) => void): Promise<void> {
  const summary = summarise(r.measurements);
  const checks = evaluate(summary.medians, summary.cpuTotals);
  const ratios = extraRatios(summary.medians);
  const overheadHeader: Record<string, unknown> = {};
  for (const m of summary.medians) if (m.overheadHeader) overheadHeader[keyOf(m.label, m)] = roundDistribution(m.overheadHeader);
  const json = {
    runs: summary.medians.map((m) => toRun(m, summary.cpuSplits.get(keyOf(m.label, m)))),
    command: r.command,
    date: r.date,
    machine: r.machine,
    versions: r.versions,
    repeats: r.args.repeats,
    seconds_per_measurement: r.args.seconds,
    upstream: r.fleet,
    bundle: { bytes: r.bundle.bytes, gzip_bytes: r.bundle.gzipBytes },
    cold_start_ms: {
      kvgate: r.coldStart.kvgate && { ready: round0(r.coldStart.kvgate.readyMs), first_response: round0(r.coldStart.kvgate.firstResponseMs) },
      floor: r.coldStart.floor && { ready: round0(r.coldStart.floor.readyMs), first_response: round0(r.coldStart.floor.firstResponseMs) },
    },
    overhead_header_ms: overheadHeader,
    checks,
    ratios,
    rps_per_repeat: summary.repeatsRps,
    figures_per_repeat: summary.perRepeat,
    errors_all_repeats: summary.errorsAllRepeats,
    notes: r.notes,
    elapsed_seconds: r.elapsedSeconds,
  };
  const md = renderMarkdown(r, summary, checks, ratios);
  if (!write) {
    console.log(md);
    return;
  }
  await mkdir(RESULTS, { recursive: true });
  await writeFile(resolve(RESULTS, "overhead.json"), `${JSON.stringify(json, null, 2)}\n`);
  await writeFile(resolve(RESULTS, "overhead.md"), md);
  const svg = renderChart(summary.medians);
  if (svg) await writeFile(resolve(RESULTS, "overhead.svg"), svg);
  log(`wrote ${resolve(RESULTS, "overhead.json")}, overhead.md${svg ? " and overhead.svg" : ""}`);
  console.log(md);
}

function round0(x: number): number {
  return Math.round(x);
}
