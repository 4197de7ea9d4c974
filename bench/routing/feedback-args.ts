import { join, resolve } from "node:path";
import { listFlag, parseFlags, positiveInt, UsageError } from "../harness/argv.ts";
import type { FeedbackConfig } from "./feedback-types.ts";

/** The deployments' settings a run may be given, each against the simulated workers' real figures. */
export const FEEDBACK_CONFIGS: readonly FeedbackConfig[] = [
  { name: "right", kv: 1, rate: 1 },
  { name: "kv-4x-big", kv: 4, rate: 1 },
  { name: "kv-4x-small", kv: 0.25, rate: 1 },
  { name: "rate-4x-slow", kv: 1, rate: 0.25 },
];

/** bench:routing-feedback's flags, parsed; lists are comma-separated. */
export interface FeedbackArgs {
  out: string;
  quick: boolean;
  reportOnly: boolean;
  seeds: number;
  sessions: number[];
  configs: FeedbackConfig[];
  /** Turns per session; the trace's own count when absent. */
  turns: number | undefined;
  /** No learning pass before the measured one: every run starts from what was configured. */
  cold: boolean;
  /** In virtual time (bench/virtual/): kvgate's routing code and the simulator's engine in one process, `draws` draws of the hops per seed. */
  virtual: boolean;
  draws: number;
}

export function parseFeedbackArgs(argv: string[], defaultOut: string): FeedbackArgs {
  const values = parseFlags(
    argv,
    {
      quick: { type: "boolean", default: false },
      "report-only": { type: "boolean", default: false },
      cold: { type: "boolean", default: false },
      virtual: { type: "boolean", default: false },
      draws: { type: "string" },
      seeds: { type: "string" },
      sessions: { type: "string" },
      configs: { type: "string" },
      turns: { type: "string" },
      out: { type: "string" },
    },
    "[--quick] [--sessions 24,32] [--seeds 3] [--configs right,kv-4x-big,kv-4x-small,rate-4x-slow] [--turns N] [--cold] [--virtual [--draws 16]] [--out DIR] [--report-only]",
  );
  const quick = values.quick;
  const names = listFlag(values.configs);
  const unknown = names?.filter((n) => !FEEDBACK_CONFIGS.some((c) => c.name === n)) ?? [];
  if (unknown.length > 0) throw new UsageError(`--configs: no config named ${unknown.join(", ")} (there are ${FEEDBACK_CONFIGS.map((c) => c.name).join(", ")})`);
  const virtual = values.virtual;
  if (!virtual && values.draws !== undefined) throw new UsageError("--draws: only with --virtual (the fleet's runs draw their own paths)");
  if (virtual && values.turns !== undefined) throw new UsageError("--turns: not with --virtual (it replays bench:routing's sessions whole)");
  return {
    // Virtual runs go beside the fleet's, never over them.
    out: values.out === undefined ? (virtual ? join(defaultOut, "virtual-feedback") : defaultOut) : resolve(values.out),
    quick,
    reportOnly: values["report-only"],
    // Quick: one point, one seed, short sessions — the capacity configs only.
    seeds: values.seeds === undefined ? (quick ? 1 : 3) : positiveInt("--seeds", values.seeds),
    sessions: listFlag(values.sessions)?.map((s) => positiveInt("--sessions", s)) ?? (quick ? [24] : [24, 32]),
    configs: names ? FEEDBACK_CONFIGS.filter((c) => names.includes(c.name)) : quick ? FEEDBACK_CONFIGS.filter((c) => c.rate === 1) : [...FEEDBACK_CONFIGS],
    turns: values.turns === undefined ? (quick ? 4 : undefined) : positiveInt("--turns", values.turns),
    cold: values.cold,
    virtual,
    draws: values.draws === undefined ? (quick ? 2 : 16) : positiveInt("--draws", values.draws),
  };
}
