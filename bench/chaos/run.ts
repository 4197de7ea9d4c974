/**
 * `npm run bench:chaos [-- --quick | --connections N | --seconds S | --max-tokens N | --out DIR]`
 *
 * Streams chat requests from many concurrent client loops through kvgate (served by Miniflare)
 * into a 4-worker simulated GPU fleet while one worker dies, one turns slow, one returns 500s and
 * one flaps, then says how the gateway coped: what the client saw (errors before the first byte,
 * cut streams and whether each ended with an SSE error event), what the gateway reported
 * (breakers, in-flight counts) and what the workers received. Writes bench/results/chaos.json
 * and chaos.md. Everything runs on 127.0.0.1 and stops on exit or Ctrl-C.
 */
import { PRESETS, startFleet, type Fleet } from "../fleet/index.ts";
import { buildGateway, startGateway, type ServedGateway } from "../harness/gateway.ts";
import { machineInfo, versionOf, toolVersions } from "../overhead/machine.ts";
import { median } from "../stats/quantiles.ts";
import { GatewayConfigSchema, type GatewayConfigInput } from "../../src/config/schema.ts";
import { parseArgs } from "./args.ts";
import { chaosFigures } from "./figures.ts";
import { startLoad, type LoadHandle, type RequestRecord } from "./load.ts";
import { errorSamples, timeline, writeReport, type ChaosReport } from "./report.ts";
import { chaosSchedule, fleetFaults } from "./schedule.ts";
import { pollOnce, startPolling, type StatusPoll } from "./status.ts";
import { runCli } from "../harness/cli.ts";

const MODEL = "kvgate-sim";
const PRESET = "a100-7b";
const WORKERS = 4;
const REQUEST_TIMEOUT_MS = 30_000;
const ERROR_PAUSE_MS = 50;
const POLL_EVERY_MS = 100;
const GRACE_MS = 25;
/** The fleet keeps at most this many requests per worker in its log (its own upper bound). */
const LOG_SIZE = 100_000;
const MAX_REQUESTS = 300_000;
/** How long the in-flight counts get to reach 0 once the streams have drained (lease releases are queued). */
const SETTLE_MS = 5_000;

const args = await runCli("bench:chaos", () => parseArgs(process.argv.slice(2)));
const started = Date.now();
const log = (line: string): void => console.error(`[${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}`);

let fleet: Fleet | null = null;
let gateway: ServedGateway | null = null;
let load: LoadHandle | null = null;

/** Stops what this run started, in reverse order; safe to call twice. */
async function cleanUp(): Promise<void> {
  load?.stop();
  const g = gateway;
  const f = fleet;
  gateway = null;
  fleet = null;
  await g?.dispose().catch((e: unknown) => log(`gateway dispose: ${String(e)}`));
  await f?.close().catch((e: unknown) => log(`fleet close: ${String(e)}`));
}

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping`);
    // A second signal, or a clean-up that hangs, still ends the process.
    const force = setTimeout(() => process.exit(130), 10_000);
    void cleanUp().finally(() => {
      clearTimeout(force);
      process.exit(130);
    });
  });
}

function gatewayConfig(urls: readonly string[]): GatewayConfigInput {
  const profile = PRESETS[PRESET];
  return {
    modelGroups: [
      {
        name: MODEL,
        strategy: "prefix-aware",
        deployments: urls.map((baseUrl, i) => ({
          id: `gpu-${i}`,
          baseUrl,
          model: MODEL,
          // The run is about failures, not load shedding: no backend is ever "full" for the gateway,
          // so a 503 for capacity cannot be mistaken for a failed failover.
          maxInFlight: args.connections,
          kvCapacityBlocks: profile.kvCapacityBlocks,
          prefillTokensPerSec: Math.round(1000 / profile.prefillMsPerToken),
        })),
      },
    ],
  };
}

/** Polls until no backend has a request in flight, or SETTLE_MS passes; the last answer. */
async function settledStatus(url: string, headers: Record<string, string>): Promise<StatusPoll> {
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const poll = await pollOnce(url, MODEL, headers, 5000);
    const busy = poll.backends === null || poll.backends.some((b) => b.inFlight !== 0);
    if (!busy || Date.now() >= deadline) return poll;
    await new Promise((r) => setTimeout(r, 200));
  }
}

function tally(records: readonly RequestRecord[], key: (r: RequestRecord) => string | null): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of records) {
    const k = key(r);
    if (k !== null) out[k] = (out[k] ?? 0) + 1;
  }
  return out;
}

/** What the gateway makes of the group's config: failover, breaker, timeouts, with their defaults. */
function groupSettings(config: GatewayConfigInput): Record<string, unknown> {
  const group = GatewayConfigSchema.parse(config).modelGroups[0];
  if (!group) return {};
  const { deployments: _deployments, ...settings } = group;
  return settings;
}

function definedKnobs(knobs: Readonly<Record<string, number | undefined>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(knobs)) if (v !== undefined) out[k] = v;
  return out;
}

function medianGap(polls: readonly StatusPoll[]): number | null {
  return median(polls.slice(1).map((p, i) => p.sentAt - (polls[i] as StatusPoll).sentAt));
}

function progress(records: readonly RequestRecord[]): string {
  const t = tally(records, (r) => r.outcome);
  return `${records.length} requests: ok ${t.ok ?? 0}, early errors ${t["early-error"] ?? 0}, cut ${t.cut ?? 0}`;
}

async function main(): Promise<void> {
  const durationMs = args.seconds * 1000;
  const schedule = chaosSchedule(durationMs);
  log("bundling the gateway");
  await buildGateway();
  fleet = await startFleet({
    workers: WORKERS,
    basePort: 0,
    preset: PRESET,
    servedModelName: MODEL,
    requestLogSize: LOG_SIZE,
    faults: fleetFaults(schedule),
    holdFaults: true,
  });
  const config = gatewayConfig(fleet.urls);
  gateway = await startGateway({ config });
  const auth = { authorization: `Bearer ${gateway.key}` };
  const backendIds = fleet.urls.map((_, i) => `gpu-${i}`);
  log(`fleet (${PRESET}) at ${fleet.urls.join(" ")}, gateway at ${gateway.url}`);

  // The isolate, the Durable Object and the connection pools come up before the clock starts.
  const warm = startLoad({ url: gateway.url, headers: auth, model: MODEL, connections: 8, durationMs: 1000, maxTokens: args.maxTokens, timeoutMs: REQUEST_TIMEOUT_MS, errorPauseMs: ERROR_PAUSE_MS, maxRequests: 200 });
  const warmRun = await warm.done;
  const warmFailed = warmRun.records.filter((r) => r.outcome !== "ok");
  if (warmFailed.length > 0) throw new Error(`the gateway fails before any fault: ${warmFailed[0]?.detail ?? "?"}`);

  const poller = startPolling(gateway.url, MODEL, auth, POLL_EVERY_MS);
  fleet.startFaults();
  log(`load: ${args.connections} connections for ${args.seconds} s, max_tokens ${args.maxTokens}`);
  for (const s of schedule) log(`  ${backendIds[s.worker]}: ${s.text}`);
  load = startLoad({
    url: gateway.url,
    headers: auth,
    model: MODEL,
    connections: args.connections,
    durationMs,
    maxTokens: args.maxTokens,
    timeoutMs: REQUEST_TIMEOUT_MS,
    errorPauseMs: ERROR_PAUSE_MS,
    maxRequests: MAX_REQUESTS,
  });
  const current = load;
  const ticker = setInterval(() => {
    log(progress(current.records));
    for (const e of (fleet?.events ?? []).filter((x) => x.at > Date.now() - 5000)) log(`  ${backendIds[e.worker]} ${e.kind}`);
  }, 5000);
  let run;
  try {
    run = await current.done;
  } finally {
    clearInterval(ticker);
  }
  log(`load stopped; streams drained ${((run.drainedAt - run.stoppedAt) / 1000).toFixed(1)} s later. ${progress(run.records)}`);
  const finalPoll = await settledStatus(gateway.url, auth);
  await poller.stop();

  const f = fleet;
  const arrivals = backendIds.map((_, i) => f.requests(i).map((r) => r.at).filter((t) => t >= run.startedAt));
  // The gateway stamps each upstream request with its Durable Object's decision time, the clock
  // its breakers' `since` is on: a request counts against an open breaker only if it was routed
  // while open, however late it reached the worker.
  const routedAt = backendIds.map((_, i) =>
    f
      .requests(i)
      .map((r) => Number(r.headers["x-kvgate-routed-at"]))
      .filter((t) => Number.isFinite(t) && t >= run.startedAt),
  );
  const notes: string[] = [];
  backendIds.forEach((id, i) => {
    if (f.requests(i).length >= LOG_SIZE) notes.push(`${id}'s request log is full (${LOG_SIZE}): its counts cover only its last ${LOG_SIZE} requests.`);
  });
  const dying = schedule.find((s) => s.role === "dies")?.worker ?? 0;
  const flapping = schedule.find((s) => s.role === "flaps")?.worker ?? 3;
  const figures = chaosFigures({
    records: run.records,
    polls: poller.polls,
    finalPoll,
    events: f.events,
    arrivals,
    routedAt,
    backendIds,
    dyingWorker: dying,
    flappingWorker: flapping,
    graceMs: GRACE_MS,
  });
  const machine = machineInfo();
  const versions = toolVersions();
  const report: ChaosReport = {
    ...figures,
    notes: [...figures.notes, ...notes],
    command: `npm run bench:chaos${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
    date: new Date().toISOString(),
    quick: args.quick,
    load_started_at: run.startedAt,
    machine: { cpu: machine.cpu, cores: machine.cores, memory_gib: machine.memoryGiB, node: machine.node },
    versions: { kvgate: versions.kvgate ?? "unknown", wrangler: versionOf("wrangler"), miniflare: versionOf("miniflare"), workerd: versionOf("workerd") },
    load: {
      connections: args.connections,
      seconds: args.seconds,
      max_tokens: args.maxTokens,
      request_timeout_ms: REQUEST_TIMEOUT_MS,
      error_pause_ms: ERROR_PAUSE_MS,
      drain_ms: run.drainedAt - run.stoppedAt,
    },
    fleet: { preset: PRESET, workers: WORKERS },
    gateway_config: config,
    gateway_settings: groupSettings(config),
    schedule: schedule.map((s) => ({ worker: s.worker, backend: backendIds[s.worker] ?? "", role: s.role, fault: s.text, knobs: definedKnobs(s.knobs) })),
    fault_events: f.events.map((e) => ({ backend: backendIds[e.worker] ?? String(e.worker), kind: e.kind, at_s: Math.round((e.at - run.startedAt) / 10) / 100 })),
    status_polls: { count: poller.polls.length, failed: poller.polls.filter((p) => p.error !== null).length, median_gap_ms: medianGap(poller.polls) },
    received_by_backend: Object.fromEntries(backendIds.map((id, i) => [id, arrivals[i]?.length ?? 0])),
    answered_by_backend: tally(run.records, (r) => r.backend),
    reasons: tally(run.records, (r) => r.reason),
    timeline: timeline({
      records: run.records,
      polls: poller.polls,
      events: f.events,
      arrivals,
      backendIds,
      startedAt: run.startedAt,
      endAt: run.drainedAt,
      bucketMs: Math.max(1000, Math.round(durationMs / 30 / 1000) * 1000),
    }),
    error_samples: errorSamples(run.records),
  };
  writeReport(args.out, report);
  log(`wrote ${args.out}/chaos.json and chaos.md`);
  log(
    `requests ${report.requests}, errors_before_first_byte ${report.errors_before_first_byte}, streams_cut ${report.streams_cut} ` +
      `(${report.streams_cut_without_error_event} without an error event), inflight_after ${JSON.stringify(report.inflight_after)}, ` +
      `breaker_open_ms ${report.breaker_open_ms}, recovery_ms ${report.recovery_ms}, sent_to_open_backend ${report.sent_to_open_backend}`,
  );
}

try {
  await main();
} catch (error) {
  log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
} finally {
  await cleanUp();
}
