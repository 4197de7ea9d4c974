import { faultsFor, profileOf, resolveFleetOptions, type FleetOptions } from "./options.ts";
import { startWorker, type SimWorker } from "./worker-server.ts";

export type { FleetOptions, FaultTarget } from "./options.ts";
export { DEFAULTS, OPTION_SPECS, resolveFleetOptions } from "./options.ts";
export { PRESETS, PRESET_NAMES, type GpuProfile, type PresetName } from "./presets.ts";

export interface Fleet {
  /** http://127.0.0.1:<port> of each worker, in worker order. */
  urls: string[];
  ports: number[];
  /** Stops every worker: closes the ports, cuts open connections, cancels timers. */
  close(): Promise<void>;
}

/**
 * Starts a simulated GPU fleet: `workers` OpenAI-compatible servers on 127.0.0.1, all in this
 * process. Rejects (after closing any worker it started) if a port is taken or an option is bad.
 */
export async function startFleet(options: Partial<FleetOptions> = {}): Promise<Fleet> {
  const resolved = resolveFleetOptions(options);
  const profile = profileOf(resolved);
  const workers: SimWorker[] = [];
  try {
    for (let index = 0; index < resolved.workers; index++) {
      workers.push(
        await startWorker({
          index,
          port: resolved.basePort === 0 ? 0 : resolved.basePort + index,
          servedModelName: resolved.servedModelName,
          profile,
          faults: faultsFor(resolved, index),
          defaultMaxTokens: resolved.defaultMaxTokens,
          seed: resolved.seed,
          requestLogSize: resolved.requestLogSize,
        }),
      );
    }
  } catch (error) {
    await Promise.all(workers.map((w) => w.close()));
    throw error;
  }
  return {
    urls: workers.map((w) => w.url),
    ports: workers.map((w) => w.port),
    close: async () => {
      await Promise.all(workers.map((w) => w.close()));
    },
  };
}
