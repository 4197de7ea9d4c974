import { resolve } from "node:path";
import { listFlag, parseFlags, positiveInt, UsageError } from "../harness/argv.ts";
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

const USAGE = "--quick --report-only --merge --seeds N --regime R,... --trace T,... --strategy S,... --shards N,... --sessions N,... --peers P,...|none --out DIR --scheduling-policy fcfs,priority";

export function parseRoutingArgs(argv: string[], defaultOut: string): RoutingArgs {
  const values = parseFlags(
    argv,
    {
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
    USAGE,
  );
  return {
    out: values.out === undefined ? defaultOut : resolve(values.out),
    quick: values.quick,
    reportOnly: values["report-only"],
    merge: values.merge,
    seeds: positiveInt("--seeds", values.seeds),
    regimes: listFlag(values.regime),
    traces: listFlag(values.trace),
    strategies: listFlag(values.strategy),
    shards: listFlag(values.shards)?.map((s) => positiveInt("--shards", s)),
    sessions: listFlag(values.sessions)?.map((s) => positiveInt("--sessions", s)),
    peers: values.peers,
    schedulingPolicies: schedulingPoliciesFlag(values["scheduling-policy"]),
  };
}

/** --scheduling-policy's list: the workers' policies a router runs in front of. */
export function schedulingPoliciesFlag(value: string): SchedulingPolicy[] {
  return (listFlag(value) ?? []).map((s) => {
    if (!isSchedulingPolicy(s)) throw new UsageError(`--scheduling-policy: "${s}" is not one of ${SCHEDULING_POLICIES.join(", ")}`);
    return s;
  });
}
