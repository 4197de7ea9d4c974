/**
 * bench/results/chaos.json (the issue's figures first, in its exact names, context after) and
 * chaos.md (goals, figures, the fault story and a timeline of what the client and the gateway saw).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { FaultEvent } from "../fleet/index.ts";
import { median } from "../stats/quantiles.ts";
import type { ChaosFigures } from "./figures.ts";
import type { RequestRecord } from "./load.ts";
import type { Role } from "./schedule.ts";
import type { BreakerState, StatusPoll } from "./status.ts";

export interface TimelineRow {
  /** Seconds after the load started, bucket start. */
  t: number;
  ok: number;
  early_errors: number;
  cut: number;
  cut_without_error_event: number;
  /** Client requests open at the bucket's end. */
  in_flight: number;
  /** Median time, sending to the end of the stream, of the ok requests that ended in the bucket. */
  ok_p50_ms: number | null;
  /** Per backend: inference requests its worker received in the bucket, and its breaker at the bucket's end. */
  backends: Record<string, { received: number; breaker: BreakerState | null }>;
  events: string[];
}

export interface ChaosReport extends ChaosFigures {
  command: string;
  date: string;
  quick: boolean;
  /** Date.now() at t = 0 (the load and the fault clock started); the epoch times here relate to it. */
  load_started_at: number;
  machine: Record<string, string | number>;
  versions: Record<string, string>;
  load: { connections: number; seconds: number; max_tokens: number; request_timeout_ms: number; error_pause_ms: number; drain_ms: number };
  fleet: { preset: string; workers: number };
  gateway_config: unknown;
  /** The model group's settings as the gateway resolves them (defaults included), deployments aside. */
  gateway_settings: Record<string, unknown>;
  schedule: { worker: number; backend: string; role: Role; fault: string; knobs: Record<string, number> }[];
  fault_events: { backend: string; kind: FaultEvent["kind"]; at_s: number }[];
  status_polls: { count: number; failed: number; median_gap_ms: number | null };
  received_by_backend: Record<string, number>;
  answered_by_backend: Record<string, number>;
  reasons: Record<string, number>;
  timeline: TimelineRow[];
  error_samples: { outcome: string; count: number; detail: string }[];
}

export interface TimelineInput {
  records: readonly RequestRecord[];
  polls: readonly StatusPoll[];
  events: readonly FaultEvent[];
  arrivals: readonly (readonly number[])[];
  backendIds: readonly string[];
  startedAt: number;
  endAt: number;
  bucketMs: number;
}

export function timeline(input: TimelineInput): TimelineRow[] {
  const rows: TimelineRow[] = [];
  const { startedAt, bucketMs, backendIds } = input;
  for (let from = startedAt; from < input.endAt; from += bucketMs) {
    const to = from + bucketMs;
    const ended = input.records.filter((r) => r.endedAt >= from && r.endedAt < to);
    const poll = input.polls.filter((p) => p.backends !== null && p.sentAt < to).at(-1);
    const backends: TimelineRow["backends"] = {};
    backendIds.forEach((id, i) => {
      const received = (input.arrivals[i] ?? []).filter((t) => t >= from && t < to).length;
      backends[id] = { received, breaker: poll?.backends?.find((b) => b.id === id)?.breaker?.state ?? null };
    });
    const okMs = ended.filter((r) => r.outcome === "ok").map((r) => r.endedAt - r.startedAt);
    rows.push({
      t: Math.round((from - startedAt) / 100) / 10,
      ok: okMs.length,
      early_errors: ended.filter((r) => r.outcome === "early-error").length,
      cut: ended.filter((r) => r.outcome === "cut").length,
      cut_without_error_event: ended.filter((r) => r.outcome === "cut" && !r.errorEvent).length,
      in_flight: input.records.filter((r) => r.startedAt < to && r.endedAt >= to).length,
      ok_p50_ms: median(okMs),
      backends,
      events: input.events
        .filter((e) => e.at >= from && e.at < to)
        .map((e) => `${backendIds[e.worker] ?? e.worker} ${e.kind} at ${((e.at - startedAt) / 1000).toFixed(2)} s`),
    });
  }
  return rows;
}

/** The most frequent failure details per outcome, with their counts. */
export function errorSamples(records: readonly RequestRecord[], perOutcome = 4): ChaosReport["error_samples"] {
  const out: ChaosReport["error_samples"] = [];
  for (const outcome of ["early-error", "cut"] as const) {
    const counts = new Map<string, number>();
    for (const r of records) {
      if (r.outcome !== outcome || r.detail === null) continue;
      // Ids and numbers differ per request; the kind of failure does not.
      const kind = r.detail.replace(/chatcmpl-[\w-]+/g, "chatcmpl-…").replace(/\d+/g, "N").slice(0, 240);
      counts.set(kind, (counts.get(kind) ?? 0) + 1);
    }
    for (const [detail, count] of [...counts].sort((a, b) => b[1] - a[1]).slice(0, perOutcome)) out.push({ outcome, count, detail });
  }
  return out;
}

const STATE_MARK: Record<BreakerState, string> = { closed: "closed", open: "**open**", "half-open": "half-open" };

function value(x: number | null, unit = ""): string {
  return x === null ? "null" : `${x}${unit}`;
}

function goals(r: ChaosReport): string[] {
  const inflight = Object.entries(r.inflight_after);
  const inflightOk = inflight.every(([, n]) => n === 0);
  const rows: [string, string, string][] = [
    ["errors_before_first_byte = 0", String(r.errors_before_first_byte), r.errors_before_first_byte === 0 ? "met" : "**not met**"],
    [
      "every cut stream ends with an SSE error event",
      `${r.streams_cut_without_error_event} of ${r.streams_cut} cut streams ended without one`,
      r.streams_cut_without_error_event === 0 ? "met" : "**not met**",
    ],
    ["inflight_after = 0 on every backend", inflight.map(([id, n]) => `${id} ${value(n)}`).join(", "), inflightOk ? "met" : "**not met**"],
    [
      "sent_to_open_backend = 0 beyond probes",
      r.sent_to_open_backend === null ? "null (no breaker in the status)" : String(r.sent_to_open_backend),
      r.sent_to_open_backend === null ? "not measurable" : r.sent_to_open_backend === 0 ? "met" : "**not met**",
    ],
  ];
  return ["| goal | result | |", "| --- | --- | --- |", ...rows.map((c) => `| ${c.join(" | ")} |`)];
}

/** Each breaker's states over the run, and the requests counted as sent to an open one. */
function breakers(r: ChaosReport): string[] {
  if (!r.breaker_reported) return ["The status reports no breakers.", ""];
  // A breaker that never changed has since 0: it has been in its state since the object started.
  const s = (t: number | null): string => (t === null ? "?" : t <= 0 ? "from the start" : ((t - r.load_started_at) / 1000).toFixed(2));
  const lines = ["States as the status polls saw them (s after the load started; the time is the breaker's own `since`):", ""];
  for (const [id, list] of Object.entries(r.breaker_transitions)) {
    lines.push(`- ${id}: ${list.map((x) => `${x.state} ${s(x.since)}`).join(" → ") || "no observation"}`);
  }
  lines.push("");
  if (r.sent_to_open_requests.length > 0) {
    lines.push(
      "Requests counted in sent_to_open_backend: " +
        r.sent_to_open_requests.map((x) => `${x.backend} at ${s(x.at)} s (${x.at - x.open_since} ms after it opened)`).join("; ") +
        ".",
      "",
    );
  }
  return lines;
}

export function renderMarkdown(r: ChaosReport): string {
  const ids = Object.keys(r.inflight_after);
  const lines: string[] = [
    "# Chaos benchmark",
    "",
    `\`${r.command}\` · ${r.date} · kvgate ${r.versions.kvgate ?? "?"} · ${r.machine.cores} cores (${r.machine.cpu}) · Node ${r.machine.node}`,
    "",
    `${r.load.connections} concurrent client loops for ${r.load.seconds} s, each sending streamed chat requests ` +
      `(max_tokens ${r.load.max_tokens}, 16 system prompts shared across the loops) to kvgate (Miniflare), which routes them ` +
      `(prefix-aware) over ${r.fleet.workers} simulated GPU workers (preset ${r.fleet.preset}). During the run one worker dies, ` +
      "one turns slow, one returns 500s and one flaps. How each figure is taken: [bench/chaos/README.md](../chaos/README.md).",
    "",
    "## Goals",
    "",
    ...goals(r),
    "",
    "## Figures",
    "",
    "| figure | value |",
    "| --- | --- |",
    `| requests | ${r.requests} (ok ${r.ok}) |`,
    `| errors_before_first_byte | ${r.errors_before_first_byte} |`,
    `| streams_cut | ${r.streams_cut} (${r.streams_cut_without_error_event} without an SSE error event) |`,
    `| inflight_after | ${ids.map((id) => `${id} ${value(r.inflight_after[id] ?? null)}`).join(", ")} |`,
    `| breaker_open_ms | ${value(r.breaker_open_ms, " ms")} |`,
    `| recovery_ms | ${value(r.recovery_ms, " ms")} |`,
    `| sent_to_open_backend | ${value(r.sent_to_open_backend)}${r.sent_to_open_backend_basis === "route-time" ? " routed to a backend while its breaker was open (by the gateway's x-kvgate-routed-at stamp)" : ""}${r.sent_to_open_backend_strict === null ? "" : `; ${r.sent_to_open_backend_strict} reached an open backend by arrival time (routed before it opened, delivered after)`} |`,
    "",
    `Requests each worker received: ${ids.map((id) => `${id} ${r.received_by_backend[id] ?? 0}`).join(", ")}. ` +
      `Answers by backend (x-kvgate-backend): ${Object.entries(r.answered_by_backend).map(([k, n]) => `${k} ${n}`).join(", ") || "none"}. ` +
      `Routing reasons (x-kvgate-reason): ${Object.entries(r.reasons).map(([k, n]) => `${k} ${n}`).join(", ") || "none"}.`,
    "",
    "## Faults",
    "",
    "| worker | backend | fault | what happened (s after the load started) |",
    "| --- | --- | --- | --- |",
    ...r.schedule.map((s) => {
      const happened = r.fault_events.filter((e) => e.backend === s.backend).map((e) => `${e.kind} ${e.at_s.toFixed(2)}`);
      return `| ${s.worker} | ${s.backend} | ${s.fault} | ${happened.join(", ") || "–"} |`;
    }),
    "",
    "## Breakers",
    "",
    ...breakers(r),
    "## Timeline",
    "",
    "Requests that ended in each interval, by outcome, the median time of the ok ones, and the client's requests still open at the interval's end; " +
      "per backend, the inference requests its worker received and its breaker at the interval's end (– when the status has no breaker).",
    "",
    `| t (s) | ok | ok p50 (ms) | early errors | cut (no error event) | open | ${ids.join(" | ")} | events |`,
    `| --- | --- | --- | --- | --- | --- | ${ids.map(() => "---").join(" | ")} | --- |`,
    ...r.timeline.map((row) => {
      const cells = ids.map((id) => {
        const b = row.backends[id];
        return b ? `${b.received} ${b.breaker ? STATE_MARK[b.breaker] : "–"}` : "–";
      });
      return `| ${row.t} | ${row.ok} | ${row.ok_p50_ms ?? "–"} | ${row.early_errors} | ${row.cut} (${row.cut_without_error_event}) | ${row.in_flight} | ${cells.join(" | ")} | ${row.events.join("; ")} |`;
    }),
    "",
  ];
  if (r.error_samples.length > 0) {
    lines.push("## Failures, most frequent first", "", "| outcome | count | detail (digits as N) |", "| --- | --- | --- |");
    for (const s of r.error_samples) lines.push(`| ${s.outcome} | ${s.count} | ${s.detail.replace(/\|/g, "\\|").replace(/\n/g, " ")} |`);
    lines.push("");
  }
  lines.push(
    "## Run",
    "",
    `Status polled ${r.status_polls.count} times (${r.status_polls.failed} failed), median gap ${value(r.status_polls.median_gap_ms, " ms")}; ` +
      `streams drained ${(r.load.drain_ms / 1000).toFixed(1)} s after the load stopped; request timeout ${r.load.request_timeout_ms / 1000} s; ` +
      `a loop pauses ${r.load.error_pause_ms} ms after an early error.`,
    "",
    `Gateway: one model group over the ${r.fleet.workers} workers (deployments gpu-0…gpu-${r.fleet.workers - 1}, maxInFlight ${r.load.connections} each so that ` +
      "no request is shed for capacity, kvCapacityBlocks and prefillTokensPerSec of the preset); every other setting is the default, resolved here " +
      "(the config as given is `gateway_config` in chaos.json):",
    "",
    "```json",
    JSON.stringify(r.gateway_settings),
    "```",
    "",
  );
  if (r.notes.length > 0) lines.push("## Notes", "", ...r.notes.map((n) => `- ${n}`), "");
  return lines.join("\n");
}

export function writeReport(dir: string, report: ChaosReport): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "chaos.json"), `${JSON.stringify(report, null, 1)}\n`);
  writeFileSync(join(dir, "chaos.md"), renderMarkdown(report));
}
