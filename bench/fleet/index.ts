import type { FaultEvent } from "./faults.ts";
import { faultsFor, profileOf, resolveFleetOptions, type FleetOptions, type WorkerFaults } from "./options.ts";
import type { LoggedRequest } from "./request-log.ts";
import { startWorker, type SimWorker } from "./worker-server.ts";

export type { FleetOptions, FaultTarget, WorkerFaults } from "./options.ts";
export type { FaultEvent, FaultKnobs } from "./faults.ts";
export type { LoggedRequest } from "./request-log.ts";
export { DEFAULTS, OPTION_SPECS, resolveFleetOptions } from "./options.ts";
export { PRESETS, PRESET_NAMES, type GpuProfile, type PresetName } from "./presets.ts";

/** startFleet's options: every FleetOptions field, plus what only a program can say. */
export interface StartFleetOptions extends Partial<FleetOptions> {
  /** Each worker's own fault knobs, by index, over the fleet-wide ones (e.g. `{ 0: { dieAtMs: 5000 } }`). */
  faults?: WorkerFaults;
  /**
   * Leave the fault clock stopped until `startFaults()`, so time-based faults count from the
   * start of a benchmark's load rather than from the fleet's start.
   */
  holdFaults?: boolean;
}

export interface Fleet {
  /** http://127.0.0.1:<port> of each worker, in worker order. */
  urls: string[];
  ports: number[];
  /** Starts the fault clock if startFleet held it; does nothing the second time. */
  startFaults(): void;
  /** When the fault clock started (Date.now()), or null while it is held. */
  readonly faultsStartedAt: number | null;
  /** Every fault event so far (onset, down, up, dead), in order. */
  readonly events: readonly FaultEvent[];
  /** Worker `index`'s request log, read in this process: it outlives a flap or a death. */
  requests(index: number): LoggedRequest[];
  /** Stops every worker: closes the ports, cuts open connections, cancels timers. */
  close(): Promise<void>;
}

/**
 * Starts a simulated GPU fleet: `workers` OpenAI-compatible servers on 127.0.0.1, all in this
 * process. Rejects (after closing any worker it started) if a port is taken or an option is bad.
 */
export async function startFleet(options: StartFleetOptions = {}): Promise<Fleet> {
  const { faults: perWorker, holdFaults = false, ...rest } = options;
  const resolved = resolveFleetOptions(rest);
  const profile = profileOf(resolved);
  const knobs = Array.from({ length: resolved.workers }, (_, index) => faultsFor(resolved, index, perWorker));
  const events: FaultEvent[] = [];
  const workers: SimWorker[] = [];
  try {
    for (let index = 0; index < resolved.workers; index++) {
      workers.push(
        await startWorker({
          index,
          port: resolved.basePort === 0 ? 0 : resolved.basePort + index,
          servedModelName: resolved.servedModelName,
          profile,
          schedulingPolicy: resolved.schedulingPolicy,
          faults: knobs[index] as (typeof knobs)[number],
          defaultMaxTokens: resolved.defaultMaxTokens,
          embeddingDimensions: resolved.embeddingDimensions,
          seed: resolved.seed,
          requestLogSize: resolved.requestLogSize,
          onFaultEvent: (kind) => events.push({ worker: index, kind, at: Date.now() }),
        }),
      );
    }
  } catch (error) {
    await Promise.all(workers.map((w) => w.close()));
    throw error;
  }
  let startedAt: number | null = null;
  const startFaults = (): void => {
    if (startedAt !== null) return;
    startedAt = Date.now();
    for (const w of workers) w.startFaults(startedAt);
  };
  if (!holdFaults) startFaults();
  return {
    urls: workers.map((w) => w.url),
    ports: workers.map((w) => w.port),
    startFaults,
    get faultsStartedAt() {
      return startedAt;
    },
    events,
    requests: (index) => workers[index]?.requests() ?? [],
    close: async () => {
      await Promise.all(workers.map((w) => w.close()));
    },
  };
}
