import type { MachineInfo } from "../overhead/machine.ts";
import { median } from "../stats/quantiles.ts";

/** One fresh process of a target. */
export interface ProcessRun {
  target: string;
  /** Its round, from 1. */
  process: number;
  /** The workerd process's CPU time per request over the measured half of its requests. */
  cpu_us_per_request: number;
  /** The median time to the first byte of those requests' answers, at the client. */
  ttfb_ms_p50: number;
}

/** A target over its processes. */
export interface TargetSummary {
  target: string;
  processes: number;
  cpu_us_per_request: { median: number; min: number; max: number };
  /** Its processes whose CPU per request was over SLOW × the run's lowest, of any target. */
  slow: number;
}

export interface ProcessesReport {
  generated_at: string;
  commit: string;
  command: string;
  machine: MachineInfo;
  processes: number;
  requests: number;
  prompt_kb: number;
  targets: TargetSummary[];
  runs: ProcessRun[];
}

/** A process this much over the run's lowest CPU per request counts as slow: the two modes seen were ~2× apart, the spread within one ~1.3×. */
export const SLOW = 1.5;

export function summarise(runs: readonly ProcessRun[], targets: readonly string[]): TargetSummary[] {
  const floor = Math.min(...runs.map((r) => r.cpu_us_per_request));
  return targets.map((target) => {
    const cpu = runs.filter((r) => r.target === target).map((r) => r.cpu_us_per_request);
    return { target, processes: cpu.length, cpu_us_per_request: { median: median(cpu) as number, min: Math.min(...cpu), max: Math.max(...cpu) }, slow: cpu.filter((c) => c > SLOW * floor).length };
  });
}

export function renderProcesses(r: ProcessesReport): string {
  const rows = r.targets.map((t) => `| ${t.target} | ${t.processes} | ${t.cpu_us_per_request.median} | ${t.cpu_us_per_request.min}–${t.cpu_us_per_request.max} | ${t.slow} |`);
  const each = r.targets.map((t) => `- ${t.target}: ${r.runs.filter((x) => x.target === t.target).map((x) => x.cpu_us_per_request).join(", ")}`);
  return `# Gateway processes

\`\`\`sh
${r.command}
\`\`\`

${r.generated_at} · ${r.machine.cpu}, ${r.machine.cores} cores · Node ${r.machine.node} · kvgate ${r.commit}

Each process: the gateway started afresh in a workerd of its own, in front of the zero-latency simulated fleet, then ${r.requests} streamed chat requests one after another, each a ${r.prompt_kb} KB system prompt and a question of its own. The figure is the workerd process's CPU time (user + system, from /proc) per request over the last ${r.requests - Math.floor(r.requests / 2)}: the first half warms V8 up. The targets take turns, round by round. A process is slow when its figure is over ${SLOW} × the run's lowest.

| target | processes | workerd CPU µs/req, median | lowest–highest | slow |
| --- | --- | --- | --- | --- |
${rows.join("\n")}

Each process, in order:

${each.join("\n")}
`;
}
