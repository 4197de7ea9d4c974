/**
 * `npm run bench:overhead [-- --quick | --repeats N | --seconds S | --targets a,b | --baseline DIR]`
 *
 * What a gateway adds to a request, against the same zero-latency simulated fleet: reached
 * directly, through the runtime's floor (a bare pass-through Worker), through the ceiling (the
 * floor plus the body read and one RPC to a toy router), through kvgate (no hooks,
 * restamp, both checking a master key; no hooks with a virtual key that has limits and usage
 * tracking) and through the peer gateways that are installed
 * (bench/peers/install.ts). kvgate and the ceiling have twins with their Durable Objects in a
 * workerd of their own, whose runs split the CPU per request between the Worker and the object.
 * Writes bench/results/overhead.json and overhead.md.
 */
import { performance } from "node:perf_hooks";
import { commitOf } from "../harness/commit.ts";
import { UsageError } from "../harness/argv.ts";
import { parseArgs } from "./args.ts";
import { bundleInfo } from "./bundle.ts";
import { startFleetProcess } from "./fleet-process.ts";
import { machineInfo, toolVersions } from "./machine.ts";
import { measure, scenarioKey, SCENARIOS, warmUp, type Measurement } from "./measure.ts";
import { peerTargets, type PeerTarget } from "./peer-targets.ts";
import { writeReport, type Report } from "./report.ts";
import { ceilingTarget, directTarget, floorTarget, kvgateTarget, measureColdStart, type Target, type TargetName } from "./targets.ts";
import { servedBy } from "../harness/process-cpu.ts";
import { round } from "../stats/round.ts";
import { runCli } from "../harness/cli.ts";

const { args, scenarios } = await runCli("bench:overhead", () => {
  const args = parseArgs(process.argv.slice(2));
  const scenarios = args.scenarios.length === 0 ? SCENARIOS : SCENARIOS.filter((s) => args.scenarios.includes(scenarioKey(s)));
  if (scenarios.length === 0) throw new UsageError(`no scenario matches ${args.scenarios.join(",")} (${SCENARIOS.map(scenarioKey).join(", ")})`);
  return { args, scenarios };
});
const wants = (n: TargetName): boolean => args.targets.includes(n);
const startedAt = performance.now();
const log = (line: string): void => console.error(`[${((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)} s] ${line}`);

/** Where the apart twins are measured: the non-streamed request at c=50, as bench:ceiling splits it. */
const APART_SCENARIOS = ["nonstream/c50"];

/** Starts a Workers target and notes the workerd serving it (its Worker's, when apart), whose CPU its runs report. */
async function onWorkerd(start: () => Promise<Target>): Promise<Target> {
  const { served, pid } = await servedBy(start);
  return pid === null ? served : { ...served, pid };
}

/** Two fleet workers: kvgate's group gets both (real routing); the others are sent to the first. */
const FLEET_WORKERS = 2;

const fleet = await startFleetProcess(FLEET_WORKERS);
const upstream = fleet.urls[0] as string;
const measurements: Measurement[] = [];
const notes: string[] = [];
const versions = toolVersions();
const running: Target[] = [];

/** Starts a peer into `running`, or notes why it is skipped. */
async function startPeer(peer: PeerTarget): Promise<Target | null> {
  const started = await peer.start(upstream, log);
  if (!started.ok) {
    notes.push(started.note);
    log(started.note);
    return null;
  }
  running.push(started.target);
  if (started.target.version) versions[started.target.name] = started.target.version;
  return started.target;
}

async function runAll(targets: Target[]): Promise<void> {
  for (const t of targets) {
    log(`warm-up ${t.label}`);
    await warmUp(t, args.warmSeconds * 1000);
    if (t.confirm) log(`${t.label}: ${await t.confirm()}`);
  }
  for (let rep = 0; rep < args.repeats; rep++) {
    // Alternate the order so slow drift of a shared machine does not always favour one target.
    const order = rep % 2 === 0 ? targets : [...targets].reverse();
    for (const t of order) {
      for (const s of scenarios.filter((x) => !t.scenarios || t.scenarios.includes(scenarioKey(x)))) {
        const m = await measure(t, s, args.seconds * 1000, rep + 1);
        measurements.push(m);
        const ttft = m.ttft.p50 === null ? "" : ` ttft p50 ${round(m.ttft.p50)} ms`;
        const dos = m.doCallsPerRequest === null ? "" : ` DO/req ${round(m.doCallsPerRequest)}`;
        log(`rep ${rep + 1}/${args.repeats} ${t.label.padEnd(16)} ${scenarioKey(s).padEnd(18)} ${String(round(m.rps)).padStart(8)} req/s  p50 ${round(m.latency.p50)} ms${ttft}${dos}${m.errors ? `  ERRORS ${m.errors}: ${m.errorSamples[0]}` : ""}`);
      }
    }
  }
}

try {
  log(`fleet (preset instant, ${FLEET_WORKERS} workers, own process) at ${fleet.urls.join(" ")}`);
  const bundle = await bundleInfo();
  log(`bundle ${bundle.bytes} B, ${bundle.gzipBytes} B gzipped`);
  const coldStart = wants("kvgate") ? await measureColdStart(() => kvgateTarget("kvgate", fleet.urls)) : null;
  const floorColdStart = wants("floor") ? await measureColdStart(() => floorTarget(upstream)) : null;
  if (coldStart) log(`cold start: kvgate ${coldStart.firstResponseMs.toFixed(0)} ms to the first answer (Miniflare ready after ${coldStart.readyMs.toFixed(0)} ms)`);

  // The Workers targets stay up together and are measured in turns, so every ratio to the floor
  // compares windows minutes apart at most.
  if (wants("direct")) running.push(directTarget(upstream));
  if (wants("floor")) running.push(await onWorkerd(() => floorTarget(upstream)));
  if (wants("ceiling")) running.push(await onWorkerd(() => ceilingTarget(upstream)));
  for (const v of ["kvgate", "kvgate-nolog", "kvgate-restamp", "kvgate-key", "kvgate-feedback", "kvgate-sharded", "kvgate-priority"] as const) if (wants(v)) running.push(await onWorkerd(() => kvgateTarget(v, fleet.urls)));
  if (args.baseline) running.push({ ...(await onWorkerd(() => kvgateTarget("kvgate", fleet.urls, { root: args.baseline as string }))), label: `kvgate@${commitOf(args.baseline)}` });
  // The apart twins only split the CPU of a non-streamed request (cpu_us_per_request); their
  // req/s is not comparable (a stub hop between the processes that production does not have).
  if (wants("ceiling-apart")) running.push({ ...(await onWorkerd(() => ceilingTarget(upstream, { objectsApart: true }))), scenarios: APART_SCENARIOS });
  if (wants("kvgate-apart")) running.push({ ...(await onWorkerd(() => kvgateTarget("kvgate-apart", fleet.urls))), scenarios: APART_SCENARIOS });
  const peers = peerTargets(args.targets, args.quick);
  for (const peer of peers.filter((p) => p.inTurns)) await startPeer(peer);
  await runAll(running);
  for (const t of running.splice(0)) await t.stop();

  // The other peers one at a time: each is a fleet of processes of its own that would compete for the cores.
  if (args.quick && wants("litellm")) notes.push("--quick: LiteLLM runs with 1 worker only; the full run adds workers = cores.");
  for (const peer of peers.filter((p) => !p.inTurns)) {
    const started = await startPeer(peer);
    if (!started) continue;
    await runAll([started]);
    await started.stop();
    running.pop();
  }

  const report: Report = {
    command: `npm run bench:overhead${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
    args,
    machine: machineInfo(),
    date: new Date().toISOString(),
    bundle,
    coldStart: { kvgate: coldStart, floor: floorColdStart },
    fleet: { preset: "instant", workers: FLEET_WORKERS, process: "own child process" },
    versions,
    notes,
    measurements,
    elapsedSeconds: Math.round((performance.now() - startedAt) / 1000),
  };
  await writeReport(report, args.write, log);
} finally {
  for (const t of running) await t.stop().catch(() => {});
  await fleet.stop();
}
