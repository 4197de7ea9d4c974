import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { SCHEDULING_POLICIES, isSchedulingPolicy, type SchedulingPolicy } from "../fleet/scheduler.ts";

/** bench:routing's flags, parsed; lists are comma-separated, and absent means "all". */
export interface RoutingArgs {
  out: string;
  quick: boolean;
  reportOnly: boolean;
  /** Keep the runs already written of every point this run does not make (bench/routing/merge.ts). */
  merge: boolean;
  seeds: number;
  regimes: string[] | undefined;
  traces: string[] | undefined;
  strategies: string[] | undefined;
  /** prefix-aware over these numbers of shards, beside the strategies. */
  shards: number[] | undefined;
  sessions: number[] | undefined;
  /** The raw --peers value: absent (every installed peer), `none`, or names (see peers.ts). */
  peers: string | undefined;
  /** The workers' scheduling policies kvgate's routers run in front of. */
  schedulingPolicies: SchedulingPolicy[];
}

export const list = (value: string | undefined): string[] | undefined => value?.split(",").filter(Boolean);

export function positiveInt(flag: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} must be a positive integer, got "${value}"`);
  return n;
}

export function parseRoutingArgs(argv: string[], defaultOut: string): RoutingArgs {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: "boolean", default: false },
      "report-only": { type: "boolean", default: false },
      merge: { type: "boolean", default: false },
      seeds: { type: "string", default: "3" },
      regime: { type: "string" },
      trace: { type: "string" },
      strategy: { type: "string" },
      shards: { type: "string" },
      sessions: { type: "string" },
      peers: { type: "string" },
      out: { type: "string" },
      "scheduling-policy": { type: "string", default: "fcfs" },
    },
  });
  return {
    out: values.out === undefined ? defaultOut : resolve(values.out),
    quick: values.quick,
    reportOnly: values["report-only"],
    merge: values.merge,
    seeds: positiveInt("--seeds", values.seeds),
    regimes: list(values.regime),
    traces: list(values.trace),
    strategies: list(values.strategy),
    shards: list(values.shards)?.map((s) => positiveInt("--shards", s)),
    sessions: list(values.sessions)?.map((s) => positiveInt("--sessions", s)),
    peers: values.peers,
    schedulingPolicies: (list(values["scheduling-policy"]) ?? []).map((s) => {
      if (!isSchedulingPolicy(s)) throw new Error(`--scheduling-policy: "${s}" is not one of ${SCHEDULING_POLICIES.join(", ")}`);
      return s;
    }),
  };
}
