import { HEALTHY, isFaultKnob, type FaultKnobs } from "./faults.ts";
import { PRESETS, PRESET_NAMES, isPresetName, isProfileKey, type GpuProfile, type PresetName } from "./presets.ts";
import { SCHEDULING_POLICIES, isSchedulingPolicy, type SchedulingPolicy } from "./scheduler.ts";

/** Workers a fault applies to: one index, or every worker. */
export type FaultTarget = number | "all";

/**
 * Every parameter of a fleet. startFleet takes any subset; the GPU profile fields default to the
 * preset's values and the rest to DEFAULTS below. OPTION_SPECS documents each one (and is the
 * CLI's --help).
 */
export interface FleetOptions extends GpuProfile, FaultKnobs {
  workers: number;
  basePort: number;
  servedModelName: string;
  preset: PresetName;
  defaultMaxTokens: number;
  embeddingDimensions: number;
  faultWorker: FaultTarget;
  seed: number;
  requestLogSize: number;
  timeScale: number;
  schedulingPolicy: SchedulingPolicy;
}

type Kind = "int" | "number" | "string" | "preset" | "fault-target" | "scheduling-policy";

export interface OptionSpec {
  kind: Kind;
  min?: number;
  max?: number;
  help: string;
}

export const OPTION_SPECS: { readonly [K in keyof FleetOptions]-?: OptionSpec } = {
  workers: { kind: "int", min: 1, max: 1024, help: "number of simulated GPU workers" },
  basePort: { kind: "int", min: 0, max: 65535, help: "worker i listens on base-port + i; 0 = ephemeral ports" },
  servedModelName: { kind: "string", help: "model name served; requests naming another model get 404" },
  preset: { kind: "preset", help: `GPU profile: ${PRESET_NAMES.join(", ")}` },
  kvCapacityBlocks: { kind: "int", min: 0, help: "KV-cache capacity per worker, in 16-token blocks" },
  maxNumSeqs: { kind: "int", min: 1, help: "sequences decoded at once; more queue FIFO" },
  maxNumBatchedTokens: { kind: "int", min: 1, help: "tokens per engine step: one per decoding sequence, the rest prefill chunks" },
  maxModelLen: { kind: "int", min: 1, help: "max prompt + output tokens; longer requests get 400" },
  prefillBaseMs: { kind: "number", min: 0, help: "fixed cost of a step that prefills, ms" },
  prefillMsPerToken: { kind: "number", min: 0, help: "prefill cost per uncached prompt token, ms" },
  decodeStepMs: { kind: "number", min: 0, help: "decode step with one running sequence, ms" },
  batchSlowdown: { kind: "number", min: 0, help: "step = decode-step-ms × (1 + this × (running − 1))" },
  defaultMaxTokens: { kind: "int", min: 1, help: "output tokens when a request sets no max_tokens" },
  embeddingDimensions: { kind: "int", min: 1, max: 65_536, help: "length of the vectors /v1/embeddings answers (a request's dimensions may ask for fewer)" },
  faultWorker: { kind: "fault-target", help: "worker index the fault options apply to, or 'all'" },
  errorRate: { kind: "number", min: 0, max: 1, help: "fraction of requests answered 500" },
  stallRate: { kind: "number", min: 0, max: 1, help: "fraction of requests that stall (stop sending, keep the connection)" },
  stallAfterChunks: { kind: "int", min: 0, help: "content events a stalling stream sends first" },
  dieAfterRequests: { kind: "int", min: 0, help: "the worker closes its port after this many requests; 0 = never" },
  slowFactor: { kind: "number", min: 0, help: "multiplies every latency of the faulty workers" },
  onsetMs: { kind: "int", min: 0, help: "ms after start at which error-rate, stall-rate and slow-factor take effect and flapping begins" },
  dieAtMs: { kind: "int", min: 0, help: "ms after start at which the worker closes its port and connections; 0 = never" },
  flapDownMs: { kind: "int", min: 0, help: "flapping: ms the port stays closed (connections refused) each cycle" },
  flapUpMs: { kind: "int", min: 0, help: "flapping: ms the worker serves between two downs" },
  flapCycles: { kind: "int", min: 0, max: 100_000, help: "flapping: down/up cycles from onset; 0 = no flapping" },
  seed: { kind: "int", min: 0, max: 0xffffffff, help: "seed of the error/stall draws" },
  requestLogSize: { kind: "int", min: 0, max: 100_000, help: "requests kept for GET /sim/requests" },
  schedulingPolicy: {
    kind: "scheduling-policy",
    help: `the order waiting requests are admitted in, as vLLM's --scheduling-policy: ${SCHEDULING_POLICIES.join(", ")} (a request's \`priority\` field, lower first; an fcfs worker refuses a non-zero one with 400, as vLLM does)`,
  },
  timeScale: {
    kind: "number",
    min: 0.01,
    max: 100,
    help: "multiplies every GPU latency of every worker (0.25: the simulated GPUs run 4x faster than the real ones, for sweeps that would take hours; times measured are then scaled time)",
  },
};

type GeneralOptions = Omit<FleetOptions, keyof GpuProfile>;

export const DEFAULTS: Readonly<GeneralOptions> = {
  workers: 4,
  basePort: 9001,
  servedModelName: "kvgate-sim",
  preset: "a100-7b",
  defaultMaxTokens: 16,
  embeddingDimensions: 384,
  faultWorker: "all",
  errorRate: 0,
  stallRate: 0,
  stallAfterChunks: 1,
  dieAfterRequests: 0,
  slowFactor: 1,
  onsetMs: 0,
  dieAtMs: 0,
  flapDownMs: 0,
  flapUpMs: 0,
  flapCycles: 0,
  seed: 1,
  requestLogSize: 50,
  timeScale: 1,
  schedulingPolicy: "fcfs",
};

export function isOptionName(name: string): name is keyof FleetOptions {
  return Object.hasOwn(OPTION_SPECS, name);
}

/** Defaults, then the preset's profile, then what was given. Throws on a bad value. */
export function resolveFleetOptions(given: Partial<FleetOptions> = {}): FleetOptions {
  const set: Partial<FleetOptions> = {};
  for (const [name, value] of Object.entries(given)) {
    if (!isOptionName(name)) throw new Error(`unknown fleet option "${name}"`);
    if (value !== undefined) Object.assign(set, { [name]: value });
  }
  const preset = set.preset ?? DEFAULTS.preset;
  if (!isPresetName(preset)) throw new Error(`unknown preset "${String(preset)}" (${PRESET_NAMES.join(", ")})`);
  const options: FleetOptions = { ...DEFAULTS, ...PRESETS[preset], ...set };
  for (const name of Object.keys(OPTION_SPECS)) if (isOptionName(name)) check(name, options[name], options);
  checkFlap(options, "fleet options");
  return options;
}

/** A flap needs time down and up, or the worker would close and reopen in the same tick. */
function checkFlap(k: FaultKnobs, where: string): void {
  if (k.flapCycles > 0 && (k.flapDownMs < 1 || k.flapUpMs < 1)) {
    throw new Error(`${where}: flapCycles ${k.flapCycles} needs flapDownMs and flapUpMs of at least 1`);
  }
}

function check(name: keyof FleetOptions, value: unknown, all: FleetOptions, label = `fleet option ${name}`): void {
  const spec = OPTION_SPECS[name];
  const bad = (why: string): Error => new Error(`${label}=${JSON.stringify(value)}: ${why}`);
  switch (spec.kind) {
    case "string":
      if (typeof value !== "string" || value === "") throw bad("must be a non-empty string");
      return;
    case "preset":
      return;
    case "scheduling-policy":
      if (!isSchedulingPolicy(value)) throw bad(`must be one of ${SCHEDULING_POLICIES.join(", ")}`);
      return;
    case "fault-target":
      if (value === "all") return;
      if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value >= all.workers) {
        throw bad(`must be "all" or a worker index below ${all.workers}`);
      }
      return;
    case "int":
    case "number":
      if (typeof value !== "number" || !Number.isFinite(value)) throw bad("must be a number");
      if (spec.kind === "int" && !Number.isInteger(value)) throw bad("must be an integer");
      if (spec.min !== undefined && value < spec.min) throw bad(`must be at least ${spec.min}`);
      if (spec.max !== undefined && value > spec.max) throw bad(`must be at most ${spec.max}`);
      if (name === "basePort" && value > 0 && value + all.workers - 1 > 65535) throw bad("leaves no room for every worker's port");
  }
}

/** Fault knobs for single workers, by worker index; they override the fleet-wide knobs for that worker. */
export type WorkerFaults = Readonly<Record<number, Partial<FaultKnobs>>>;

/**
 * The fault knobs of worker `index`: the fleet-wide ones if faultWorker targets it (else healthy),
 * then what `perWorker` sets for it. Throws on an index outside the fleet or a bad knob.
 */
export function faultsFor(options: FleetOptions, index: number, perWorker: WorkerFaults = {}): FaultKnobs {
  for (const key of Object.keys(perWorker)) {
    const i = Number(key);
    if (!Number.isInteger(i) || i < 0 || i >= options.workers) throw new Error(`faults: worker ${key} is not in a fleet of ${options.workers}`);
  }
  const base: FaultKnobs =
    options.faultWorker !== "all" && options.faultWorker !== index
      ? { ...HEALTHY }
      : {
          errorRate: options.errorRate,
          stallRate: options.stallRate,
          stallAfterChunks: options.stallAfterChunks,
          dieAfterRequests: options.dieAfterRequests,
          slowFactor: options.slowFactor,
          onsetMs: options.onsetMs,
          dieAtMs: options.dieAtMs,
          flapDownMs: options.flapDownMs,
          flapUpMs: options.flapUpMs,
          flapCycles: options.flapCycles,
        };
  const own = perWorker[index];
  if (!own) return base;
  for (const [name, value] of Object.entries(own)) {
    if (!isFaultKnob(name)) throw new Error(`faults[${index}]: unknown fault knob "${name}"`);
    if (value === undefined) continue;
    check(name, value, options, `faults[${index}].${name}`);
    base[name] = value;
  }
  checkFlap(base, `faults[${index}]`);
  return base;
}

/** The GPU profile fields of the options, latencies scaled by timeScale. */
export function profileOf(options: FleetOptions): GpuProfile {
  const { kvCapacityBlocks, maxNumSeqs, maxNumBatchedTokens, maxModelLen, prefillBaseMs, prefillMsPerToken, decodeStepMs, batchSlowdown, timeScale } = options;
  return {
    kvCapacityBlocks,
    maxNumSeqs,
    maxNumBatchedTokens,
    maxModelLen,
    prefillBaseMs: prefillBaseMs * timeScale,
    prefillMsPerToken: prefillMsPerToken * timeScale,
    decodeStepMs: decodeStepMs * timeScale,
    batchSlowdown,
  };
}

/** The default of an option, as --help shows it: one value, or one per preset. */
export function describeDefault(name: keyof FleetOptions): string {
  if (isProfileKey(name)) {
    return `from preset: ${PRESET_NAMES.map((p) => `${p} ${PRESETS[p][name]}`).join(", ")}`;
  }
  return String(DEFAULTS[name]);
}
