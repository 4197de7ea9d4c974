/** bench/results/profile-<target>.md: the profile's tables, areas first. */
import type { ProfileSummary } from "./attribute.ts";

export interface ProfileReport extends ProfileSummary {
  generated_at: string;
  commit: string;
  command: string;
  target: string;
  mode: "nonstream" | "stream";
  chunks: number | null;
  concurrency: number;
  seconds: number;
  sampling_interval_us: number;
  requests: number;
  errors: number;
  rps_under_profiler: number;
  /** The isolate's busy time over the requests served. */
  busy_us_per_request: number;
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;

export function renderProfile(r: ProfileReport): string {
  const us = (share: number) => (share * r.busy_us_per_request).toFixed(0);
  const load = r.mode === "nonstream" ? `non-streamed, c=${r.concurrency}` : `streamed ${r.chunks} chunks, c=${r.concurrency}`;
  const lines = [
    `# Where ${r.target}'s CPU goes`,
    "",
    `\`${r.command}\` at ${r.commit}, ${r.generated_at.slice(0, 10)}: V8's sampling profiler (every ${r.sampling_interval_us} µs) on the gateway's isolate — its Worker and, in the same workerd, its routing object — through ${r.seconds} s of ${load} load against \`${r.target}\`: ${r.requests} requests (${r.rps_under_profiler} req/s under the profiler), ${r.errors} errors, ${r.samples} samples. The isolate was idle ${pct(r.idle_share)} of the time; busy, it spent **${r.busy_us_per_request} µs per request** (under the profiler, which costs some of its own).`,
    "",
    "Shares are of the busy time, and µs are per request. Frames are named by kvgate's sources through the bundle's source map; `self` is a function's own time, `total` that with it anywhere on the stack.",
    "",
    "## By area (self)",
    "",
    "| area | self | µs |",
    "| --- | ---: | ---: |",
    ...r.areas.map((a) => `| ${a.area} | ${pct(a.self_share)} | ${us(a.self_share)} |`),
    "",
    "## Stages (kvgate and its libraries, by total)",
    "",
    "| function | total | µs | self |",
    "| --- | ---: | ---: | ---: |",
    ...r.stages.map((f) => `| \`${f.frame}\` | ${pct(f.total_share)} | ${us(f.total_share)} | ${pct(f.self_share)} |`),
    "",
    "## Busiest functions (self)",
    "",
    "| function | area | self | µs | total |",
    "| --- | --- | ---: | ---: | ---: |",
    ...r.functions.map((f) => `| \`${f.frame}\` | ${f.area} | ${pct(f.self_share)} | ${us(f.self_share)} | ${pct(f.total_share)} |`),
    "",
  ];
  return lines.join("\n");
}
