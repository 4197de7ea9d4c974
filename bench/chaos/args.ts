/**
 * Command line of `npm run bench:chaos`:
 *   --quick            200 connections for 15 s (the short check)
 *   --connections N    concurrent client loops (1000; 200 with --quick)
 *   --seconds S        length of the load; the fault schedule scales with it (60; 15 with --quick)
 *   --max-tokens N     output tokens per request (8)
 *   --out DIR          where chaos.json and chaos.md go (bench/results)
 */
import { resolve } from "node:path";
import { walkArgs } from "../harness/argv.ts";

export interface ChaosArgs {
  quick: boolean;
  connections: number;
  seconds: number;
  maxTokens: number;
  out: string;
}

export const DEFAULT_OUT = resolve(import.meta.dirname, "..", "results");

export function parseArgs(argv: readonly string[]): ChaosArgs {
  const quick = argv.includes("--quick");
  const args: ChaosArgs = { quick, connections: quick ? 200 : 1000, seconds: quick ? 15 : 60, maxTokens: 8, out: DEFAULT_OUT };
  walkArgs(argv, "--quick, --connections N, --seconds S, --max-tokens N, --out DIR", (a, value) => {
    if (a === "--quick") return true;
    if (a === "--connections") args.connections = bounded(a, value(), 1, 5000);
    else if (a === "--seconds") args.seconds = bounded(a, value(), 3, 600);
    else if (a === "--max-tokens") args.maxTokens = bounded(a, value(), 1, 1024);
    else if (a === "--out") args.out = resolve(value());
    else return false;
    return true;
  });
  return args;
}

/** Load stays bounded in count and time whatever the command line says. */
function bounded(flag: string, v: string, min: number, max: number): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag} takes an integer from ${min} to ${max}, not "${v}"`);
  return n;
}
