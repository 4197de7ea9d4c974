/**
 * What two of kvgate's always-on features cost in workerd CPU, from bench:ceiling's runs, paired
 * per repeat like a key's cost (key-cost.ts):
 *   request lines: kvgate − kvgate-nolog (the default config against one with sampleRate 0),
 *                  non-streamed;
 *   TTFT timing:   floor+ttft − floor+pipe (the same relay with and without reading the first
 *                  chunk in JavaScript), non-streamed and per stream length.
 */
import { pairedCost, type CeilingRun, type PairedCost } from "./key-cost.ts";

export const NO_LOG = "kvgate-nolog";
export const FLOOR_PIPE = "floor+pipe";
export const FLOOR_TTFT = "floor+ttft";

export interface FeatureCost {
  how: string;
  /** kvgate − kvgate-nolog, non-streamed. */
  request_line: PairedCost | null;
  /** floor+ttft − floor+pipe: non-streamed (chunks absent), then each streamed length measured. */
  ttft_timing: { chunks?: number; client_usage?: boolean; cost: PairedCost }[];
}

const HOW =
  "Each pair runs in turns within each repeat; each repeat gives one paired difference of workerd CPU per completed request, and the spread is over repeats. " +
  "Request lines: kvgate (default config, every request writes its JSON line) − kvgate-nolog (logging.requests.sampleRate 0), non-streamed at c=50. " +
  "TTFT timing: floor+ttft − floor+pipe, two pass-through Workers that relay the body through an IdentityTransformStream natively piped, the first also reading and writing the first chunk in JavaScript and noting its time, as kvgate's fast path does.";

interface Parts {
  runs?: readonly CeilingRun[];
  streamed?: readonly { runs: readonly CeilingRun[]; chunks: readonly number[]; client_usage: boolean }[];
}

const has = (runs: readonly CeilingRun[], ...targets: string[]) => targets.every((t) => runs.some((r) => r.target === t));

export function featureCost(r: Parts): FeatureCost {
  const runs = r.runs ?? [];
  const ttft: FeatureCost["ttft_timing"] = [];
  if (has(runs, FLOOR_PIPE, FLOOR_TTFT)) ttft.push({ cost: pairedCost(runs, FLOOR_TTFT, FLOOR_PIPE, undefined) });
  for (const s of r.streamed ?? []) {
    if (!has(s.runs, FLOOR_PIPE, FLOOR_TTFT)) continue;
    for (const chunks of s.chunks) ttft.push({ chunks, client_usage: s.client_usage, cost: pairedCost(s.runs, FLOOR_TTFT, FLOOR_PIPE, chunks) });
  }
  return { how: HOW, request_line: has(runs, "kvgate", NO_LOG) ? pairedCost(runs, "kvgate", NO_LOG, undefined) : null, ttft_timing: ttft };
}
