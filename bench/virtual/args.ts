import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import type { Strategy } from "../../src/config/schema.ts";
import { STRATEGY_NAMES } from "../../src/routing/strategies/index.ts";
import { listFlag, numberFlag, parseFlags, positiveInt, UsageError } from "../harness/argv.ts";
import type { SchedulingPolicy } from "../fleet/scheduler.ts";
import { schedulingPoliciesFlag } from "../routing/cli-args.ts";
import { REGIMES, type Regime } from "../routing/matrix.ts";
import { isOpenLoopTrace } from "../routing/open-loop-matrix.ts";
import { closedLoopRegime } from "./point.ts";
import { TRACE_KINDS, type TimedKind, type TraceKind } from "../traces/index.ts";

/** bench:routing-virtual's flags, parsed; lists are comma-separated. */
export interface VirtualArgs {
  traces: (TimedKind | TraceKind)[];
  /** Seeds per trace; absent: each trace's own count (bench/virtual/run.ts). */
  seeds: number | undefined;
  jitterSeeds: number;
  /** A hop's bound in ms, after routing and before it; absent: each trace's own (bench/virtual/run.ts). */
  hopMs: number | undefined;
  preRouteHopMs: number | undefined;
  msPerMb: number | undefined;
  regimes: Regime[];
  /** Points of the regimes' sweeps; absent: every one. */
  sessions: number[] | undefined;
  strategies: Strategy[];
  /** prefix-aware over these numbers of shards (more than 1), beside the strategies. */
  shards: number[];
  threads: number;
  quick: boolean;
  out: string;
  reportOnly: boolean;
  chainOnly: boolean;
  policies: SchedulingPolicy[];
}

const USAGE = "--trace T,... --seeds N --jitter-seeds N --hop-ms MS --pre-route-hop-ms MS --ms-per-mb MS --regime R,... --sessions N,... --strategy S,... --shards N,... --threads N --quick --out DIR --report-only --chain-only --scheduling-policy fcfs,priority";

export function parseVirtualArgs(argv: readonly string[], defaultOut: string): VirtualArgs {
  const values = parseFlags(
    argv,
    {
      trace: { type: "string", default: "mooncake" },
      seeds: { type: "string" },
      "jitter-seeds": { type: "string", default: "16" },
      "hop-ms": { type: "string" },
      "pre-route-hop-ms": { type: "string" },
      "ms-per-mb": { type: "string" },
      regime: { type: "string", default: REGIMES.map((r) => r.name).join(",") },
      sessions: { type: "string" },
      strategy: { type: "string", default: "prefix-aware,least-loaded,round-robin" },
      shards: { type: "string", default: "2,4" },
      threads: { type: "string", default: String(availableParallelism()) },
      quick: { type: "boolean", default: false },
      out: { type: "string" },
      "report-only": { type: "boolean", default: false },
      "chain-only": { type: "boolean", default: false },
      "scheduling-policy": { type: "string", default: "fcfs" },
    },
    USAGE,
  );
  const ms = (flag: string, value: string | undefined): number | undefined => {
    const n = value === undefined ? undefined : numberFlag(flag, value);
    if (n !== undefined && n < 0) throw new UsageError(`${flag} takes a number of at least 0, not "${value}"`);
    return n;
  };
  return {
    traces: (listFlag(values.trace) ?? []).map((t): TimedKind | TraceKind => {
      if (!isOpenLoopTrace(t) && !(TRACE_KINDS as readonly string[]).includes(t)) throw new UsageError(`--trace: "${t}" is not one of mooncake, b2b-saas, ${TRACE_KINDS.join(", ")}`);
      return t as TimedKind | TraceKind;
    }),
    seeds: values.seeds === undefined ? undefined : positiveInt("--seeds", values.seeds),
    jitterSeeds: values.quick ? 2 : positiveInt("--jitter-seeds", values["jitter-seeds"]),
    hopMs: ms("--hop-ms", values["hop-ms"]),
    preRouteHopMs: ms("--pre-route-hop-ms", values["pre-route-hop-ms"]),
    msPerMb: ms("--ms-per-mb", values["ms-per-mb"]),
    regimes: (listFlag(values.regime) ?? []).map((name) => closedLoopRegime(name)),
    sessions: listFlag(values.sessions)?.map((n) => positiveInt("--sessions", n)),
    strategies: (listFlag(values.strategy) ?? []).map((s): Strategy => {
      if (!(STRATEGY_NAMES as readonly string[]).includes(s)) throw new UsageError(`--strategy: "${s}" is not one of ${STRATEGY_NAMES.join(", ")}`);
      return s as Strategy;
    }),
    shards: (listFlag(values.shards) ?? []).map((s) => positiveInt("--shards", s)).filter((n) => n > 1),
    threads: positiveInt("--threads", values.threads),
    quick: values.quick,
    out: values.out === undefined ? defaultOut : resolve(values.out),
    reportOnly: values["report-only"],
    chainOnly: values["chain-only"],
    policies: schedulingPoliciesFlag(values["scheduling-policy"]),
  };
}
