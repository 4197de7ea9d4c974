/**
 * Command line of `npm run bench:chaos`:
 *   --quick            200 connections for 15 s (the short check)
 *   --connections N    concurrent client loops (1000; 200 with --quick)
 *   --seconds S        length of the load; the fault schedule scales with it (60; 15 with --quick)
 *   --max-tokens N     output tokens per request (8)
 *   --out DIR          where chaos.json and chaos.md go (bench/results)
 */
import { resolve } from "node:path";
import { intBetween, parseFlags } from "../harness/argv.ts";

export interface ChaosArgs {
  quick: boolean;
  connections: number;
  seconds: number;
  maxTokens: number;
  out: string;
}

export const DEFAULT_OUT = resolve(import.meta.dirname, "..", "results");

export function parseArgs(argv: readonly string[]): ChaosArgs {
  const v = parseFlags(
    argv,
    {
      quick: { type: "boolean", default: false },
      connections: { type: "string" },
      seconds: { type: "string" },
      "max-tokens": { type: "string", default: "8" },
      out: { type: "string" },
    },
    "--quick, --connections N, --seconds S, --max-tokens N, --out DIR",
  );
  // Load stays bounded in count and time whatever the command line says.
  return {
    quick: v.quick,
    connections: v.connections === undefined ? (v.quick ? 200 : 1000) : intBetween("--connections", v.connections, 1, 5000),
    seconds: v.seconds === undefined ? (v.quick ? 15 : 60) : intBetween("--seconds", v.seconds, 3, 600),
    maxTokens: intBetween("--max-tokens", v["max-tokens"], 1, 1024),
    out: v.out === undefined ? DEFAULT_OUT : resolve(v.out),
  };
}
