/**
 * Command line of `npm run bench:overhead`:
 *   --quick            one repeat, short windows (the whole run under 3 minutes)
 *   --repeats N        measurements per scenario and target; the median run is reported (3)
 *   --seconds S        length of each measurement window (5; 1.5 with --quick)
 *   --targets a,b      only these targets (direct, floor, kvgate, kvgate-nolog, kvgate-restamp, kvgate-key,
 *                      litellm, portkey)
 *   --scenarios a,b    only these scenarios, e.g. nonstream/c50,stream/c1/100ch (for investigations)
 *   --baseline DIR     add kvgate as bundled from another checkout (a worktree of an earlier
 *                      commit), measured in turns with the rest: an A/B of two commits in one run
 *   --no-write         print the results, leave bench/results/ alone
 */
import { resolve } from "node:path";
import { walkArgs } from "../harness/argv.ts";
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

function isTargetName(s: string): s is TargetName {
  return (TARGET_NAMES as readonly string[]).includes(s);
}

export function parseArgs(argv: string[]): BenchArgs {
  const quick = argv.includes("--quick");
  const args: BenchArgs = { quick, repeats: quick ? 1 : 3, seconds: quick ? 1.5 : 5, warmSeconds: quick ? 1 : 3, targets: [...TARGET_NAMES], scenarios: [], write: true, baseline: null };
  walkArgs(argv, "", (a, value) => {
    if (a === "--quick") return true;
    if (a === "--no-write") args.write = false;
    else if (a === "--repeats") args.repeats = positive(a, value());
    else if (a === "--seconds") args.seconds = positive(a, value());
    else if (a === "--targets") {
      const names = value().split(",");
      for (const n of names) if (!isTargetName(n)) throw new Error(`unknown target "${n}" (${TARGET_NAMES.join(", ")})`);
      args.targets = names.filter(isTargetName);
    } else if (a === "--scenarios") args.scenarios = value().split(",");
    else if (a === "--baseline") args.baseline = resolve(value());
    else return false;
    return true;
  });
  return args;
}

function positive(flag: string, v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${flag} takes a positive number, not "${v}"`);
  return n;
}
