/**
 * Command line of `npm run bench:overhead`:
 *   --quick            one repeat, short windows (the whole run under 3 minutes)
 *   --repeats N        measurements per scenario and target; each figure is the median over them (3)
 *   --seconds S        length of each measurement window (5; 1.5 with --quick)
 *   --targets a,b      only these targets (direct, floor, ceiling, kvgate, kvgate-nolog, kvgate-restamp,
 *                      kvgate-key, kvgate-feedback, kvgate-sharded, kvgate-priority, ceiling-apart, kvgate-apart,
 *                      litellm, portkey); the -apart twins run non-streamed at c=50 only
 *   --scenarios a,b    only these scenarios, e.g. nonstream/c50,stream/c1/100ch (for investigations)
 *   --baseline DIR     add kvgate as bundled from another checkout (a worktree of an earlier
 *                      commit), measured in turns with the rest: an A/B of two commits in one run
 *   --no-write         print the results, leave bench/results/ alone
 */
import { resolve } from "node:path";
import { parseFlags, positiveInt, positiveNumber, UsageError } from "../harness/argv.ts";
import { TARGET_NAMES, type TargetName } from "./targets.ts";

export interface BenchArgs {
  quick: boolean;
  repeats: number;
  seconds: number;
  warmSeconds: number;
  targets: TargetName[];
  /** Scenario keys (measure.ts scenarioKey); empty = all. */
  scenarios: string[];
  write: boolean;
  /** Another checkout whose kvgate is measured beside this one's (`kvgate@<its commit>`). */
  baseline: string | null;
}

const USAGE = "--quick --repeats N --seconds S --targets a,b --scenarios a,b --baseline DIR --no-write";

function isTargetName(s: string): s is TargetName {
  return (TARGET_NAMES as readonly string[]).includes(s);
}

export function parseArgs(argv: readonly string[]): BenchArgs {
  const v = parseFlags(
    argv,
    {
      quick: { type: "boolean", default: false },
      repeats: { type: "string" },
      seconds: { type: "string" },
      targets: { type: "string" },
      scenarios: { type: "string" },
      baseline: { type: "string" },
      "no-write": { type: "boolean", default: false },
    },
    USAGE,
  );
  const names = v.targets?.split(",") ?? [...TARGET_NAMES];
  for (const n of names) if (!isTargetName(n)) throw new UsageError(`unknown target "${n}" (${TARGET_NAMES.join(", ")})`);
  return {
    quick: v.quick,
    repeats: v.repeats === undefined ? (v.quick ? 1 : 3) : positiveInt("--repeats", v.repeats),
    seconds: v.seconds === undefined ? (v.quick ? 1.5 : 5) : positiveNumber("--seconds", v.seconds),
    warmSeconds: v.quick ? 1 : 3,
    targets: names.filter(isTargetName),
    scenarios: v.scenarios?.split(",") ?? [],
    write: !v["no-write"],
    baseline: v.baseline === undefined ? null : resolve(v.baseline),
  };
}
