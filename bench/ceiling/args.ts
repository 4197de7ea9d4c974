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
 *   --no-write       print the results, leave bench/results/ alone
 */
import { resolve } from "node:path";
import { walkArgs } from "../harness/argv.ts";

export interface CeilingArgs {
  repeats: number;
  seconds: number;
  write: boolean;
  baselines: string[];
  /** Chunks per streamed answer, one measurement each; empty for the non-streamed run. */
  stream: number[];
  clientUsage: boolean;
}

const USAGE = "--repeats N --seconds S --baseline DIR --stream N --client-usage --no-write";

export function parseCeilingArgs(argv: readonly string[]): CeilingArgs {
  const args: CeilingArgs = { repeats: 6, seconds: 3, write: true, baselines: [], stream: [], clientUsage: false };
  walkArgs(argv, USAGE, (flag, value) => {
    if (flag === "--repeats") args.repeats = positive(flag, value(), true);
    else if (flag === "--seconds") args.seconds = positive(flag, value(), false);
    else if (flag === "--baseline") args.baselines.push(resolve(value()));
    else if (flag === "--stream") args.stream.push(positive(flag, value(), true));
    else if (flag === "--client-usage") args.clientUsage = true;
    else if (flag === "--no-write") args.write = false;
    else return false;
    return true;
  });
  if (args.clientUsage && args.stream.length === 0) throw new Error("--client-usage applies to streamed runs: add --stream N");
  args.stream = [...new Set(args.stream)].sort((a, b) => a - b);
  return args;
}

function positive(flag: string, text: string, integer: boolean): number {
  const n = Number(text);
  if (!(n > 0) || (integer && !Number.isInteger(n))) throw new Error(`${flag} needs a positive ${integer ? "integer" : "number"}, not "${text}"`);
  return n;
}
