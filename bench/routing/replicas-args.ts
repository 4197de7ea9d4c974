import { resolve } from "node:path";
import { listFlag, parseFlags, positiveInt } from "../harness/argv.ts";

/** bench:routing-replicas's flags, parsed; lists are comma-separated. */
export interface ReplicasArgs {
  out: string;
  quick: boolean;
  reportOnly: boolean;
  seeds: number;
  instances: number[];
  sessions: number[];
  /** kvgate strategies and peer names (bench/routing/peers.ts). */
  routers: string[];
  /** Turns per session; the trace's own count when absent. */
  turns: number | undefined;
}

export const DEFAULT_ROUTERS = ["prefix-aware", "sglang-cache_aware"];

export function parseReplicasArgs(argv: string[], defaultOut: string): ReplicasArgs {
  const values = parseFlags(
    argv,
    {
      quick: { type: "boolean", default: false },
      "report-only": { type: "boolean", default: false },
      seeds: { type: "string" },
      instances: { type: "string" },
      sessions: { type: "string" },
      routers: { type: "string" },
      turns: { type: "string" },
      out: { type: "string" },
    },
    "--quick --report-only --seeds N --instances N,... --sessions N,... --routers R,... --turns N --out DIR",
  );
  const ints = (flag: string, value: string | undefined) => listFlag(value)?.map((s) => positiveInt(flag, s));
  // Quick: the smallest comparison that still shows it — one instance against four, one point, one seed.
  const quick = values.quick;
  return {
    out: values.out === undefined ? defaultOut : resolve(values.out),
    quick,
    reportOnly: values["report-only"],
    seeds: values.seeds === undefined ? (quick ? 1 : 3) : positiveInt("--seeds", values.seeds),
    instances: ints("--instances", values.instances) ?? (quick ? [1, 4] : [1, 2, 4, 8]),
    sessions: ints("--sessions", values.sessions) ?? (quick ? [8] : [8, 16, 24]),
    routers: listFlag(values.routers) ?? DEFAULT_ROUTERS,
    turns: values.turns === undefined ? (quick ? 4 : undefined) : positiveInt("--turns", values.turns),
  };
}
