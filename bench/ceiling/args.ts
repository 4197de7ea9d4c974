/**
 * Command line of `npm run bench:ceiling`:
 *   --repeats N      repeats; each measures every target once, in alternating order (6)
 *   --seconds S      length of each measurement (3)
 *   --baseline DIR   add kvgate as bundled from another checkout; may be given several times
 *   --stream N       streamed load with N-chunk answers instead of non-streamed, for the floor
 *                    and the kvgate targets; given several times, every length in each repeat
 *                    (`--stream 1 --stream 100` gives the per-chunk cost)
 *   --client-usage   streamed: the client asks for stream_options.include_usage itself (by
 *                    default it does not, as most clients, so a virtual key's request asks for
 *                    it and takes the usage event out again)
 *   --target T,...   only these targets (and the baselines), for an A/B probe: with --no-write,
 *                    since the committed results have every target
 *   --together       each repeat loads every target at once, each at c=50, so the machine's noise
 *                    (a shared VM's steal) falls on all of them alike: CPU per request paired within
 *                    one window, for an A/B probe (with --no-write; req/s are not a solo run's)
 *   --no-write       print the results, leave bench/results/ alone
 */
import { resolve } from "node:path";
import { parseFlags, positiveInt, positiveNumber, UsageError } from "../harness/argv.ts";

export interface CeilingArgs {
  repeats: number;
  seconds: number;
  write: boolean;
  baselines: string[];
  /** Chunks per streamed answer, one measurement each; empty for the non-streamed run. */
  stream: number[];
  clientUsage: boolean;
  /** The targets asked for by name; empty for all of the run's kind. */
  targets: string[];
  /** Every target loaded at once in each repeat. */
  together: boolean;
}

const USAGE = "--repeats N --seconds S --baseline DIR --stream N --client-usage --target T,... --together --no-write";

export function parseCeilingArgs(argv: readonly string[]): CeilingArgs {
  const v = parseFlags(
    argv,
    {
      repeats: { type: "string", default: "6" },
      seconds: { type: "string", default: "3" },
      baseline: { type: "string", multiple: true, default: [] },
      stream: { type: "string", multiple: true, default: [] },
      "client-usage": { type: "boolean", default: false },
      target: { type: "string" },
      together: { type: "boolean", default: false },
      "no-write": { type: "boolean", default: false },
    },
    USAGE,
  );
  const stream = v.stream.map((n) => positiveInt("--stream", n));
  if (v["client-usage"] && stream.length === 0) throw new UsageError("--client-usage applies to streamed runs: add --stream N");
  const targets = v.target === undefined ? [] : v.target.split(",").filter((t) => t !== "");
  if (v.target !== undefined && targets.length === 0) throw new UsageError("--target takes one or more target names");
  if (targets.length > 0 && !v["no-write"]) throw new UsageError("--target is for probes: add --no-write (the committed results have every target)");
  if (v.together && !v["no-write"]) throw new UsageError("--together is for probes: add --no-write (the committed results load one target at a time)");
  return {
    repeats: positiveInt("--repeats", v.repeats),
    seconds: positiveNumber("--seconds", v.seconds),
    write: !v["no-write"],
    baselines: v.baseline.map((dir) => resolve(dir)),
    stream: [...new Set(stream)].sort((a, b) => a - b),
    clientUsage: v["client-usage"],
    targets,
    together: v.together,
  };
}
