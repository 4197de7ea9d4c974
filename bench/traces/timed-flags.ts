import type { ParseArgsOptionsConfig } from "node:util";
import { numberFlag, UsageError } from "../harness/argv.ts";
import { isPresetName, type PresetName } from "../fleet/presets.ts";
import { profileOf, resolveFleetOptions } from "../fleet/options.ts";
import type { FleetShape } from "./fleet-load.ts";
import { B2B_SAAS_DEFAULTS, b2bSaasTrace, type B2bSaasOptions } from "./kinds/b2b-saas.ts";
import { MOONCAKE_FILES, mooncakeTrace } from "./kinds/mooncake.ts";
import type { TimedKind, TimedTrace } from "./timed.ts";

/**
 * The command-line flags that name an open-loop trace and the fleet it is meant for, shared by
 * bench/traces/cli.ts (which prints the trace's demand and the speed for a load) and
 * bench/replay/cli.ts (which replays it), in node:util parseArgs form.
 */
export const TIMED_FLAGS = {
  /** mooncake: conversation or synthetic. */
  file: { type: "string", default: "conversation" },
  "from-minutes": { type: "string" },
  minutes: { type: "string" },
  "follow-ups": { type: "string" },
  "max-model-len": { type: "string" },
  /** The fleet a load is computed for: its preset, workers and time scale. */
  preset: { type: "string", default: "a100-7b" },
  workers: { type: "string", default: "4" },
  "time-scale": { type: "string", default: "1" },
  /** Target load (e.g. 0.8): the speed factor (or Poisson rate) is derived for it. */
  load: { type: "string" },
  /** b2b-saas options as key=value, any B2B_SAAS_DEFAULTS field (e.g. --b2b stages=9 --b2b rateScale=0.6). */
  b2b: { type: "string", multiple: true, default: [] as string[] },
} satisfies ParseArgsOptionsConfig;

export interface TimedFlagValues {
  file?: string;
  "from-minutes"?: string;
  minutes?: string;
  "follow-ups"?: string;
  "max-model-len"?: string;
  preset?: string;
  workers?: string;
  "time-scale"?: string;
  load?: string;
  b2b?: string[];
}

/** An optional number flag's value (`flag` without its dashes); undefined when it was not given. */
export function number(flag: string, value: string | undefined): number | undefined {
  return value === undefined ? undefined : numberFlag(`--${flag}`, value);
}

export function timedTraceFromFlags(kind: TimedKind, v: TimedFlagValues): TimedTrace {
  if (kind === "b2b-saas") return b2bSaasTrace(b2bOptions(v.b2b ?? []));
  const file = MOONCAKE_FILES.find((f) => f === v.file);
  if (!file) throw new UsageError(`--file must be one of ${MOONCAKE_FILES.join(", ")}`);
  const followUps = v["follow-ups"];
  if (followUps !== undefined && followUps !== "infer" && followUps !== "none") throw new UsageError("--follow-ups must be infer or none");
  const fromMinutes = number("from-minutes", v["from-minutes"]);
  const minutes = number("minutes", v.minutes);
  const maxModelLen = number("max-model-len", v["max-model-len"]);
  return mooncakeTrace({
    file,
    ...(fromMinutes !== undefined ? { fromMinutes } : {}),
    ...(minutes !== undefined ? { minutes } : {}),
    ...(followUps !== undefined ? { followUps } : {}),
    ...(maxModelLen !== undefined ? { maxModelLen } : {}),
  });
}

export function b2bOptions(pairs: readonly string[]): Partial<B2bSaasOptions> {
  const options: Record<string, number> = {};
  for (const pair of pairs) {
    const [key = "", value] = pair.split("=");
    if (!(key in B2B_SAAS_DEFAULTS)) throw new UsageError(`unknown b2b-saas option ${key} (one of ${Object.keys(B2B_SAAS_DEFAULTS).join(", ")})`);
    if (value === undefined) throw new UsageError(`--b2b ${key} needs a value: --b2b ${key}=N`);
    options[key] = numberFlag(`--b2b ${key}`, value);
  }
  return options;
}

/** The fleet a load is computed for; its profile at the time scale, as startFleet would run it. */
export function fleetFromFlags(v: TimedFlagValues): FleetShape & { preset: PresetName; timeScale: number } {
  const preset = v.preset ?? "a100-7b";
  if (!isPresetName(preset)) throw new UsageError(`--preset must be a100-7b, l4-7b or instant`);
  const workers = number("workers", v.workers) ?? 4;
  const timeScale = number("time-scale", v["time-scale"]) ?? 1;
  return { preset, timeScale, workers, profile: profileOf(resolveFleetOptions({ preset, workers, timeScale })) };
}
