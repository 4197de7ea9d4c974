import type { MachineInfo } from "../overhead/machine.ts";
import { median } from "../stats/quantiles.ts";

/** One fresh process of a target. */
export interface ProcessRun {
  target: string;
  /** Its round, from 1. */
  process: number;
  /** The workerd process's CPU time per request with the long prompt, over the measured half. */
  cpu_us_per_request: number;
  /** The same with the short prompt, measured in the same seconds (blocks of each in turn). */
  short_cpu_us_per_request: number;
  /** The one over the other: what the process is judged by (the machine's drift cancels). */
  long_over_short: number;
  /** The median time to the first byte of the measured long-prompt answers, at the client. */
  ttfb_ms_p50: number;
}

interface Spread {
  median: number;
  min: number;
  max: number;
}

/** A target over its processes. */
export interface TargetSummary {
  target: string;
  processes: number;
  cpu_us_per_request: Spread;
  short_cpu_us_per_request: Spread;
  long_over_short: Spread;
  /** Its processes whose long_over_short was over SLOW × the run's lowest, of any target. */
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
  short_prompt_kb: number;
  targets: TargetSummary[];
  runs: ProcessRun[];
}

/** A process whose ratio is this much over the run's lowest counts as slow: the loop V8 gave up on doubled it. */
export const SLOW = 1.5;

const spread = (xs: number[]): Spread => ({ median: median(xs) as number, min: Math.min(...xs), max: Math.max(...xs) });

export function summarise(runs: readonly ProcessRun[], targets: readonly string[]): TargetSummary[] {
  const floor = Math.min(...runs.map((r) => r.long_over_short));
  return targets.map((target) => {
    const mine = runs.filter((r) => r.target === target);
    return {
      target,
      processes: mine.length,
      cpu_us_per_request: spread(mine.map((r) => r.cpu_us_per_request)),
      short_cpu_us_per_request: spread(mine.map((r) => r.short_cpu_us_per_request)),
      long_over_short: spread(mine.map((r) => r.long_over_short)),
      slow: mine.filter((r) => r.long_over_short > SLOW * floor).length,
    };
  });
}

const range = (s: Spread): string => `${s.median} (${s.min}–${s.max})`;

export function renderProcesses(r: ProcessesReport): string {
  const rows = r.targets.map((t) => `| ${t.target} | ${t.processes} | ${range(t.cpu_us_per_request)} | ${range(t.short_cpu_us_per_request)} | ${range(t.long_over_short)} | ${t.slow} |`);
  const each = r.targets.map((t) => `- ${t.target}: ${r.runs.filter((x) => x.target === t.target).map((x) => `${x.cpu_us_per_request} / ${x.short_cpu_us_per_request} (× ${x.long_over_short})`).join(", ")}`);
  return `# Gateway processes

\`\`\`sh
${r.command}
\`\`\`

${r.generated_at} · ${r.machine.cpu}, ${r.machine.cores} cores · Node ${r.machine.node} · kvgate ${r.commit}

Each process: the gateway started afresh in a workerd of its own, in front of the zero-latency simulated fleet, then ${r.requests} streamed chat requests one after another, each a system prompt and a question of its own: the first half, with a ${r.prompt_kb} KB prompt, warms V8 up; over the second, with that prompt and a ${r.short_prompt_kb} KB one in blocks of each in turn, the workerd process's CPU time (user + system, from /proc) per request of each size. A process is judged by the ratio of the two, measured in the same seconds, so the machine's own drift cancels: slow when it is over ${SLOW} × the run's lowest. The targets take turns, round by round.

| target | processes | workerd CPU µs/req at ${r.prompt_kb} KB, median (lowest–highest) | at ${r.short_prompt_kb} KB | ratio | slow |
| --- | --- | --- | --- | --- | --- |
${rows.join("\n")}

Each process, in order (µs at ${r.prompt_kb} KB / at ${r.short_prompt_kb} KB, and their ratio):

${each.join("\n")}
`;
}
