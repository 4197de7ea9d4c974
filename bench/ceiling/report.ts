/**
 * bench/results/ceiling.{json,md}. The non-streamed run keeps the file's original fields
 * (generated_at … runs); a streamed run (--stream) is a section of `streamed`, one per kind of
 * client (asking for usage or not), replaced by the next run of its kind. Each run rewrites only
 * its own part, so `key_cost` is derived from whichever parts are in the file, each with its date
 * and commit.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { MachineInfo } from "../overhead/machine.ts";
import { median as medianOrNull } from "../stats/quantiles.ts";
import { round as roundFigure } from "../stats/round.ts";
import { cpuSplit, type CpuSplit, type SideSplit } from "./cpu-split.ts";
import type { RoutePayload } from "./route-payload.ts";
import { featureCost, type FeatureCost } from "./feature-cost.ts";
import { KEY, KEY_NO_USAGE, RESTAMP, ownPerChunk, perChunk, perRequest, type CeilingRun, type PerChunk, type Spread } from "./key-cost.ts";
import { does, type Name } from "./targets.ts";

export const RESULTS = resolve(import.meta.dirname, "..", "results");

export interface Median {
  target: Name;
  rps: number;
  rps_vs_floor: number | null;
  cpu_us_per_request: number;
  cpu_vs_floor: number | null;
  errors: number;
  chunks?: number;
}

/** One measured kind of run: when, at which commit, how, and its medians and runs. */
interface RunPart {
  generated_at: string;
  commit: string;
  command: string;
  concurrency: number;
  seconds: number;
  repeats: number;
  medians: Median[];
  runs: CeilingRun[];
}

export interface StreamedSection extends RunPart {
  client_usage: boolean;
  chunks: number[];
  /** Each target's own CPU per chunk, on medians, between the shortest and longest streams. */
  cpu_us_per_chunk: Record<string, number | null>;
}

interface StreamKeyCost {
  client_usage: boolean;
  /** The key's added CPU per streamed request, for each length. */
  per_stream: { chunks: number; cpu_us_added: Spread }[];
  per_chunk: PerChunk | null;
  /** kvgate-key over kvgate-restamp, per chunk: what reading the usage adds to the JavaScript read loop both take. */
  per_chunk_over_restamp: PerChunk | null;
}

export interface KeyCost {
  how: string;
  /** kvgate-key − kvgate, non-streamed, paired per repeat. */
  cpu_us_per_request_added: Spread | null;
  /** kvgate-key / kvgate, the same runs. */
  cpu_per_request_ratio: Spread | null;
  /** kvgate-key-nousage − kvgate: the key check and rpm / in-flight limits, without usage accounting. */
  cpu_us_per_request_added_without_usage: Spread | null;
  /** From the streamed section whose client does not ask for usage (the key asks and strips it), else the other. */
  cpu_us_per_chunk_added: Spread | null;
  cpu_us_per_chunk_added_from_medians: number | null;
  streamed: StreamKeyCost[];
}

export interface CeilingReport extends RunPart {
  machine: MachineInfo;
  streamed?: StreamedSection[];
  key_cost?: KeyCost;
  feature_cost?: FeatureCost;
  cpu_split?: CpuSplit;
  route_payload?: RoutePayload;
}

const round = (x: number): number => roundFigure(x) as number;
const median = (values: readonly number[]): number => medianOrNull(values) as number;

/** Medians per target (of the runs with `chunks`), with ratios to the floor's. */
export function mediansOf(runs: readonly CeilingRun[], targets: readonly Name[], chunks?: number): Median[] {
  const of = (t: string) => runs.filter((r) => r.target === t && r.chunks === chunks);
  const floor = of("floor");
  const floorRps = floor.length > 0 ? median(floor.map((r) => r.rps)) : null;
  const floorCpu = floor.length > 0 ? median(floor.map((r) => r.cpu_us_per_request)) : null;
  return targets.map((target) => {
    const mine = of(target);
    const rps = median(mine.map((r) => r.rps));
    const cpu = median(mine.map((r) => r.cpu_us_per_request));
    return {
      target,
      ...(chunks === undefined ? {} : { chunks }),
      rps,
      rps_vs_floor: floorRps ? round(rps / floorRps) : null,
      cpu_us_per_request: cpu,
      cpu_vs_floor: floorCpu ? round(cpu / floorCpu) : null,
      errors: mine.reduce((n, r) => n + r.errors, 0),
    };
  });
}

const HOW =
  "kvgate-key and kvgate run in turns within each repeat; each repeat gives one paired difference of workerd CPU per completed request, " +
  "and the spread is over repeats. Per request: kvgate-key − kvgate, non-streamed at c=50. Per chunk: ((kvgate-key − kvgate) at the longest stream − " +
  "(kvgate-key − kvgate) at the shortest) / (longest − shortest chunks), streamed at c=50: the per-stream cost cancels, the per-event one stays.";

export function keyCost(r: Partial<CeilingReport>): KeyCost {
  const measured = (t: string) => (r.runs ?? []).some((x) => x.target === t);
  const nonstream = r.runs && measured(KEY) ? perRequest(r.runs, undefined) : null;
  const withoutUsage = r.runs && measured(KEY_NO_USAGE) ? perRequest(r.runs, undefined, KEY_NO_USAGE) : null;
  const streamed = (r.streamed ?? []).map((s): StreamKeyCost => ({
    client_usage: s.client_usage,
    per_stream: s.chunks.map((chunks) => ({ chunks, cpu_us_added: perRequest(s.runs, chunks).added })),
    per_chunk: perChunk(s.runs),
    per_chunk_over_restamp: s.runs.some((x) => x.target === RESTAMP) ? perChunk(s.runs, KEY, RESTAMP) : null,
  }));
  const headline = streamed.find((s) => !s.client_usage && s.per_chunk) ?? streamed.find((s) => s.per_chunk);
  return {
    how: HOW,
    cpu_us_per_request_added: nonstream?.added ?? null,
    cpu_per_request_ratio: nonstream?.ratio ?? null,
    cpu_us_per_request_added_without_usage: withoutUsage?.added ?? null,
    cpu_us_per_chunk_added: headline?.per_chunk?.added ?? null,
    cpu_us_per_chunk_added_from_medians: headline?.per_chunk?.added_from_medians ?? null,
    streamed,
  };
}

export function streamedSection(part: RunPart, clientUsage: boolean, chunks: number[], targets: readonly Name[]): StreamedSection {
  return { ...part, client_usage: clientUsage, chunks, cpu_us_per_chunk: ownPerChunk(part.runs, targets) };
}

async function readExisting(path: string): Promise<Partial<CeilingReport>> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as Partial<CeilingReport>;
  } catch {
    return {};
  }
}

/** Puts this run's part into ceiling.json beside the parts already there, and re-derives key_cost. */
export async function merge(update: { main: CeilingReport } | { streamed: StreamedSection; machine: MachineInfo }): Promise<Partial<CeilingReport>> {
  const existing = await readExisting(join(RESULTS, "ceiling.json"));
  let next: Partial<CeilingReport>;
  if ("main" in update) next = { ...update.main, ...(existing.streamed ? { streamed: existing.streamed } : {}) };
  else {
    const others = (existing.streamed ?? []).filter((s) => s.client_usage !== update.streamed.client_usage);
    next = { ...existing, machine: existing.machine ?? update.machine, streamed: [...others, update.streamed].sort((a, b) => Number(a.client_usage) - Number(b.client_usage)) };
  }
  delete next.key_cost;
  delete next.feature_cost;
  delete next.cpu_split;
  return { ...next, key_cost: keyCost(next), feature_cost: featureCost(next), ...(next.runs ? { cpu_split: cpuSplit(next.runs) } : {}) };
}

export async function write(report: Partial<CeilingReport>): Promise<void> {
  await writeFile(join(RESULTS, "ceiling.json"), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(join(RESULTS, "ceiling.md"), renderMarkdown(report));
}

const cell = (x: number | string | null | undefined): string => (x === null || x === undefined ? "–" : String(x));
const range = (s: Spread | null): string => (s && s.median !== null ? `**${s.median}** (quartiles ${s.q1}–${s.q3}, range ${s.min}–${s.max}, ${s.repeats} repeats)` : "not measured");

function keyCostMd(k: KeyCost): string[] {
  const lines = [
    "## What a virtual key costs (kvgate-key − kvgate)",
    "",
    "kvgate-key is kvgate with a virtual key instead of the master key: rpm, tpm, max_parallel and a token budget set",
    "far above the load (checked, never refusing) and usage tracking on, so every answer's usage is read and carried to the",
    "tenants object: a stream's by the JavaScript relay when the event must be taken out (the client did not ask for it), else",
    "(since e580970) from a tapped copy of the body, the client's bytes on the native pipe. Workerd CPU µs added, paired per repeat:",
    "",
    `- per request (non-streamed, c=50): ${range(k.cpu_us_per_request_added)}; × kvgate: ${range(k.cpu_per_request_ratio)}`,
    `  - of which the key check and rpm / in-flight limits without usage accounting (kvgate-key-nousage, native pipe): ${range(k.cpu_us_per_request_added_without_usage)}`,
    `- per chunk (streamed, c=50): ${range(k.cpu_us_per_chunk_added)}; from the medians instead: ${cell(k.cpu_us_per_chunk_added_from_medians)}`,
  ];
  for (const s of k.streamed) {
    const who = s.client_usage ? "the client asks for include_usage (the event is passed on)" : "the client does not ask for usage (the key asks, and strips the event)";
    lines.push(`- streamed, ${who}:`);
    for (const p of s.per_stream) lines.push(`  - per ${p.chunks}-chunk stream: ${range(p.cpu_us_added)}`);
    if (s.per_chunk) lines.push(`  - per chunk (${s.per_chunk.from_chunks} → ${s.per_chunk.to_chunks} chunks): ${range(s.per_chunk.added)}; from the medians: ${cell(s.per_chunk.added_from_medians)}`);
    const r = s.per_chunk_over_restamp;
    const loop = s.client_usage ? "whose chunks take the JavaScript read loop, where this key's take the native pipe" : "whose chunks take the same JavaScript read loop";
    if (r) lines.push(`  - per chunk over kvgate-restamp, ${loop}: ${range(r.added)}; from the medians: ${cell(r.added_from_medians)}`);
  }
  lines.push("", k.how, "");
  return lines;
}

function featureCostMd(f: FeatureCost): string[] {
  const lines = ["## What request lines and TTFT timing cost", "", "Workerd CPU µs added, paired per repeat:", ""];
  const line = f.request_line;
  lines.push(`- a request line (kvgate − kvgate-nolog, non-streamed, c=50): ${line ? `${range(line.added)}; × kvgate-nolog: ${range(line.ratio)}` : "not measured"}`);
  for (const t of f.ttft_timing) {
    const kind = t.chunks === undefined ? "non-streamed" : `streamed, ${t.chunks} chunk${t.chunks === 1 ? "" : "s"}${t.client_usage ? ", the client asks for usage" : ""}`;
    lines.push(`- timing the first byte (floor+ttft − floor+pipe, ${kind}, c=50): ${range(t.cost.added)}`);
  }
  lines.push("", f.how, "");
  return lines;
}

function cpuSplitMd(c: CpuSplit): string[] {
  const lines = ["## The Worker's CPU and the routing object's", "", "Per non-streamed request at c=50, µs of CPU, paired per repeat:", ""];
  const row = (s: SideSplit) =>
    `- ${s.target}: Worker ${range(s.worker_us)}; object ${range(s.object_us)}; served apart, the Worker's process (with the stub hop) ${range(s.apart_worker_us)}, req/s × ${range(s.apart_rps_ratio)}`;
  lines.push(...c.sides.map(row));
  const v = c.versus_ceiling;
  if (v) {
    lines.push(
      "",
      "kvgate over the ceiling (floor+body+route), same repeats:",
      "",
      `- req/s: ${range(v.rps_ratio)} (goal ≥ 0.9)`,
      `- workerd CPU per request: ${range(v.cpu_ratio)} (goal ≤ 1.15)`,
      `- the Worker's side alone: ${range(v.worker_cpu_ratio)}`,
      `- the object's side alone (kvgate's routing object over the toy router): ${range(v.object_cpu_ratio)}`,
    );
  }
  lines.push("", c.how, "");
  return lines;
}

function routePayloadMd(p: RoutePayload): string[] {
  return [
    "## The route call's size",
    "",
    `For this benchmark's prompt (${p.chain_blocks} blocks): the call ${p.call_bytes} B (${p.call_with_release_bytes} B with a finished lease riding along), the answer ${p.answer_bytes} B.`,
    "",
    p.how,
    "",
  ];
}

function streamedMd(s: StreamedSection): string[] {
  return [
    `## Streamed, c=${s.concurrency}, ${s.chunks.join(" and ")} chunks; ${s.client_usage ? "the client asks for include_usage" : "the client does not ask for usage"}`,
    "",
    "```sh",
    s.command,
    "```",
    "",
    `${s.generated_at} · kvgate ${s.commit} · median of ${s.repeats} × ${s.seconds} s per length and target`,
    "",
    "| target | chunks | req/s | × floor | CPU µs/req | × floor | errors |",
    "| --- | --- | --- | --- | --- | --- | --- |",
    ...s.medians.map((m) => `| ${m.target} | ${cell(m.chunks)} | ${m.rps} | ${cell(m.rps_vs_floor)} | ${m.cpu_us_per_request} | ${cell(m.cpu_vs_floor)} | ${m.errors} |`),
    "",
    `Each target's own CPU per chunk (medians, ${s.chunks[0]} → ${s.chunks.at(-1)} chunks): ${Object.entries(s.cpu_us_per_chunk)
      .map(([t, v]) => `${t} ${cell(v)} µs`)
      .join(", ")}.`,
    "",
  ];
}

export function renderMarkdown(r: Partial<CeilingReport>): string {
  const m = r.machine;
  const lines = [
    "# What the runtime charges a routing gateway",
    "",
    "Chat completions at c=50 against the zero-latency simulated fleet, each target in its own workerd (Miniflare),",
    "alternating within each repeat. CPU is the workerd process's user + system time per completed request; the ratios",
    "compare medians of the same run.",
    "",
  ];
  if (r.medians && r.runs) {
    lines.push(
      "## Non-streamed",
      "",
      "```sh",
      r.command ?? "npm run bench:ceiling",
      "```",
      "",
      `${r.generated_at} · kvgate ${r.commit ?? "?"} · ${m?.cpu}, ${m?.cores} cores (shared) · Node ${m?.node} · median of ${r.repeats} × ${r.seconds} s`,
      "",
      "| target | what it does per request | req/s | × floor | CPU µs/req | × floor |",
      "| --- | --- | --- | --- | --- | --- |",
      ...r.medians.map((x) => `| ${x.target} | ${does(x.target)} | ${x.rps} | ${cell(x.rps_vs_floor)} | ${x.cpu_us_per_request} | ${cell(x.cpu_vs_floor)} |`),
      "",
      "floor+body+route is the least a prefix-routing gateway on Workers can do: it has to read the prompt",
      "to hash it, and has to ask the group's Durable Object. Its ratio to the floor bounds what kvgate's",
      "ratio can reach on this runtime and machine; kvgate's distance from it is kvgate's own work.",
      "",
    );
  }
  if (r.cpu_split) lines.push(...cpuSplitMd(r.cpu_split));
  if (r.route_payload) lines.push(...routePayloadMd(r.route_payload));
  if (r.key_cost) lines.push(...keyCostMd(r.key_cost));
  if (r.feature_cost) lines.push(...featureCostMd(r.feature_cost));
  for (const s of r.streamed ?? []) lines.push(...streamedMd(s));
  return lines.join("\n");
}
