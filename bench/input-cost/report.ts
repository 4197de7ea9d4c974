/** bench:input's figures: per body and target, the median CPU per request over the repeats and its spread. */
import type { MachineInfo } from "../overhead/machine.ts";
import { ascending, median } from "../stats/quantiles.ts";
import { round } from "../stats/round.ts";
import type { InputShape } from "./bodies.ts";
import { STAGES, type StageTimes } from "./pieces.ts";

export interface Answer {
  status: number;
  code: string | null;
  param: string | null;
  /** Whether the answer came from an upstream: the body was validated, routed and sent on. */
  routed: boolean;
}

export interface Run {
  target: string;
  shape: string;
  repeat: number;
  cpu_ms_per_request: number;
  wall_ms_per_request: number;
  answer: Answer;
}

export interface TargetFigures {
  answer: Answer;
  cpu_ms: { median: number | null; min: number | null; max: number | null };
  wall_ms_median: number | null;
}

export interface ShapeSummary {
  shape: string;
  holds: string;
  bytes: number;
  targets: Record<string, TargetFigures>;
  /** Node, ms per stage; a stage the body never reached is absent. */
  stages_ms: StageTimes;
}

export function summarise(shapes: InputShape[], targets: string[], runs: Run[], stages: Record<string, StageTimes>): ShapeSummary[] {
  return shapes.map((s) => ({
    shape: s.name,
    holds: s.holds,
    bytes: new TextEncoder().encode(s.text).length,
    targets: Object.fromEntries(
      targets.map((t) => {
        const mine = runs.filter((r) => r.target === t && r.shape === s.name);
        const cpu = ascending(mine.map((r) => r.cpu_ms_per_request));
        const figures: TargetFigures = {
          answer: (mine[mine.length - 1] as Run).answer,
          cpu_ms: { median: round(median(cpu)), min: round(cpu[0] ?? null), max: round(cpu[cpu.length - 1] ?? null) },
          wall_ms_median: round(median(mine.map((r) => r.wall_ms_per_request))),
        };
        return [t, figures];
      }),
    ),
    stages_ms: Object.fromEntries(Object.entries(stages[s.name] ?? {}).map(([k, v]) => [k, round(v)])),
  }));
}

interface Report {
  generated_at: string;
  machine: MachineInfo;
  versions: Record<string, string>;
  repeats: number;
  requests: number;
  summary: ShapeSummary[];
}

function answerText(a: Answer): string {
  if (a.routed) return a.status === 200 ? "200" : `${a.status} from the upstream`;
  return `${a.status} ${a.code ?? ""}${a.param ? ` (${a.param})` : ""}`;
}
const cpuText = (f: TargetFigures) => `${f.cpu_ms.median} (${f.cpu_ms.min}–${f.cpu_ms.max})`;

export function reportMarkdown(r: Report): string {
  const targets = Object.keys(r.summary[0]?.targets ?? {});
  const worst = (t: string) => r.summary.reduce((a, b) => ((b.targets[t]?.cpu_ms.median ?? 0) > (a.targets[t]?.cpu_ms.median ?? 0) ? b : a));
  const lines = [
    "# What one request can cost",
    "",
    "Each body goes to the bundled gateway (default limits, 4 MiB bodies) in its own workerd, in front of",
    "the simulated fleet, one request at a time. CPU is the workerd process's user + system time per",
    `request, the mean of ${r.requests} requests; the figure is the median of ${r.repeats} repeats, (min–max) beside it.`,
    "It includes reading the body from the socket and, for a body that is routed, writing it to the upstream",
    "(\"from the upstream\": the simulated engine refused the prompt as longer than its context, after the gateway's work).",
    "",
    "```sh",
    "npm run bench:input",
    "```",
    "",
    `${r.generated_at} · kvgate ${r.versions.kvgate} · ${r.machine.cpu}, ${r.machine.cores} cores (shared) · Node ${r.machine.node} · workerd ${r.versions.workerd}`,
    "",
    ...targets.map((t) => {
      const w = worst(t);
      return `Worst case for ${t}: **${w.targets[t]?.cpu_ms.median} ms** of CPU per request (${w.shape}: ${w.holds}).`;
    }),
    "",
    `| body | what it holds | ${targets.map((t) => `${t}: answer | ${t}: CPU ms/request`).join(" | ")} |`,
    `| --- | --- | ${targets.map(() => "--- | ---").join(" | ")} |`,
    ...r.summary.map((s) => `| ${s.shape} | ${s.holds} | ${targets.map((t) => `${answerText(s.targets[t]?.answer as Answer)} | ${cpuText(s.targets[t] as TargetFigures)}`).join(" | ")} |`),
    "",
    "Where the time goes: the request path's stages on the same bodies, this checkout's code in Node (ms, median",
    "of 5); a body refused at a stage stops there.",
    "",
    `| body | ${STAGES.join(" | ")} | total |`,
    `| --- | ${STAGES.map(() => "---").join(" | ")} | --- |`,
    ...r.summary.map((s) => {
      const total = STAGES.reduce((n, st) => n + (s.stages_ms[st] ?? 0), 0);
      return `| ${s.shape} | ${STAGES.map((st) => s.stages_ms[st] ?? "").join(" | ")} | ${round(total)} |`;
    }),
    "",
  ];
  return lines.join("\n");
}
