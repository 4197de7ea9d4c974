import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { brotliDecompressSync } from "node:zlib";
import { BlockText, PROMPT_OVERHEAD_TOKENS, TRACE_BLOCK_TOKENS } from "../block-text.ts";
import type { TimedRequest, TimedTrace } from "../timed.ts";

/**
 * The Mooncake FAST'25 request traces (bench/traces/data/mooncake/, Apache-2.0, unchanged), as
 * open-loop traces: each request at its timestamp, its prompt rendered from its 512-token block
 * ids (block-text.ts).
 */

export const MOONCAKE_FILES = ["conversation", "synthetic"] as const;
export type MooncakeFile = (typeof MOONCAKE_FILES)[number];

export interface MooncakeOptions {
  file: MooncakeFile;
  /** Start of the slice, in minutes from the trace's start. Default 0. */
  fromMinutes?: number;
  /** Length of the slice in minutes; default the rest of the trace. */
  minutes?: number;
  /**
   * Whether a request waits for the earlier turn of its conversation (TimedRequest.after).
   * Default: "infer" for the synthetic trace, built to keep multi-turn order; "none" for the
   * conversation trace, whose requests all open with the same block and whose follow-up order
   * is already in its real timestamps (the rule below would pair unrelated requests there).
   */
  followUps?: "infer" | "none";
  /**
   * Leave out requests whose prompt and output, as the simulator counts them, exceed this many
   * tokens (the fleet's maxModelLen: longer ones get a 400). Default: keep all; the longest needs
   * 126,538 (conversation) or 191,378 + its output (synthetic), so start the fleet with
   * --max-model-len 262144 to replay them whole.
   */
  maxModelLen?: number;
}

interface Row {
  /** Line number in the file, from 0: the request's stable name. */
  line: number;
  timestamp: number;
  inputLength: number;
  outputLength: number;
  hashIds: number[];
}

const DATA_DIR = join(import.meta.dirname, "..", "data", "mooncake");

/** SHA-256 of the decompressed files as published (see the data folder's README). */
const SHA256: Readonly<Record<MooncakeFile, string>> = {
  conversation: "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
  synthetic: "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
};

const loaded = new Map<MooncakeFile, readonly Row[]>();

/** Every request of a trace file, read once per process; throws if the file is not the published one. */
export function mooncakeRows(file: MooncakeFile): readonly Row[] {
  const cached = loaded.get(file);
  if (cached) return cached;
  const jsonl = brotliDecompressSync(readFileSync(join(DATA_DIR, `${file}_trace.jsonl.br`)));
  const sha = createHash("sha256").update(jsonl).digest("hex");
  if (sha !== SHA256[file]) throw new Error(`${file}_trace.jsonl.br is not the published trace (sha256 ${sha})`);
  const rows = jsonl
    .toString("utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line, i) => parseRow(line, i));
  loaded.set(file, rows);
  return rows;
}

function parseRow(line: string, index: number): Row {
  const value: unknown = JSON.parse(line);
  const bad = (why: string): Error => new Error(`mooncake trace line ${index + 1}: ${why}`);
  if (typeof value !== "object" || value === null) throw bad("not an object");
  const { timestamp, input_length: inputLength, output_length: outputLength, hash_ids: hashIds } = value as Record<string, unknown>;
  if (typeof timestamp !== "number" || !(timestamp >= 0)) throw bad("timestamp must be a number ≥ 0");
  if (!Number.isInteger(inputLength) || (inputLength as number) < 1) throw bad("input_length must be an integer ≥ 1");
  if (!Number.isInteger(outputLength) || (outputLength as number) < 0) throw bad("output_length must be an integer ≥ 0");
  if (!Array.isArray(hashIds) || hashIds.length === 0 || !hashIds.every((id) => Number.isInteger(id) && id >= 0)) {
    throw bad("hash_ids must be a non-empty array of integers ≥ 0");
  }
  const ids = hashIds as number[];
  if ((inputLength as number) > ids.length * TRACE_BLOCK_TOKENS) throw bad("input_length is longer than its blocks");
  return { line: index, timestamp, inputLength: inputLength as number, outputLength: outputLength as number, hashIds: ids };
}

/** A slice of a Mooncake trace as an open-loop trace; times count from the slice's start. */
export function mooncakeTrace(options: MooncakeOptions): TimedTrace {
  const { file, fromMinutes = 0, minutes = Infinity, maxModelLen = Infinity } = options;
  const followUps = options.followUps ?? (file === "synthetic" ? "infer" : "none");
  if (!(fromMinutes >= 0) || !(minutes > 0)) throw new RangeError("fromMinutes must be ≥ 0 and minutes > 0");
  const from = fromMinutes * 60_000;
  const to = from + minutes * 60_000;
  const inSlice = mooncakeRows(file).filter((r) => r.timestamp >= from && r.timestamp < to);
  const rows = inSlice.filter((r) => r.inputLength + PROMPT_OVERHEAD_TOKENS + Math.max(1, r.outputLength) <= maxModelLen);
  const after = followUps === "infer" ? inferFollowUps(rows) : rows.map(() => null);
  const text = new BlockText();
  const requests: TimedRequest[] = rows.map((r, i) => ({
    id: `mooncake-${file}-${r.line}`,
    atMs: r.timestamp - from,
    after: after[i] ?? null,
    maxTokens: Math.max(1, r.outputLength),
    promptTokens: r.inputLength,
    blocks: r.hashIds,
    messages: () => [{ role: "user", content: text.prompt(r.hashIds, r.inputLength) }],
  }));
  return {
    kind: "mooncake",
    params: {
      file,
      fromMinutes,
      minutes: Number.isFinite(minutes) ? minutes : "all",
      followUps,
      maxModelLen: Number.isFinite(maxModelLen) ? maxModelLen : "none",
      requests: requests.length,
      tooLong: inSlice.length - rows.length,
      followUpRequests: after.filter((a) => a !== null).length,
    },
    blockTokens: TRACE_BLOCK_TOKENS,
    requests,
  };
}

/**
 * The earlier turn each request follows, or null. The traces name no conversations, so a turn
 * is recognised by its shape: request j is followed by a later request r when every full block
 * of j's prompt is a prefix of r's (a partial last block changes once the answer is appended to
 * it) and r's prompt has room for j's prompt and its answer (input_r ≥ input_j + output_j): the
 * history, the answer, then the new message. Of several such j, the latest. A prompt as long as
 * its sibling's but not longer — another question on the same document — follows nothing.
 * On the whole synthetic trace this finds 421 follow-ups, arriving 48 ms to 15 min after the
 * turn they follow (10th percentile 13.7 s, median 2.2 min).
 */
export function inferFollowUps(rows: readonly TurnShape[]): (number | null)[] {
  // Block ids are chained (an id stands for its whole prefix, as the README's prefix rule needs):
  // the id of a prompt's last full block is the key of all its full blocks.
  const byLastFull = new Map<number, number[]>();
  return rows.map((r, index) => {
    let found: number | null = null;
    for (let k = r.hashIds.length; k >= 1; k--) {
      const candidates = byLastFull.get(r.hashIds[k - 1] ?? -1);
      if (!candidates) continue;
      // Only the longest prefix that is an earlier prompt's full blocks: that prompt is the conversation so far.
      found = latestTurn(rows, candidates, r, k);
      break;
    }
    const full = fullBlocks(r);
    if (full > 0) {
      const key = r.hashIds[full - 1] ?? -1;
      const list = byLastFull.get(key);
      if (list) list.push(index);
      else byLastFull.set(key, [index]);
    }
    return found;
  });
}

type TurnShape = Pick<Row, "inputLength" | "outputLength" | "hashIds">;

function fullBlocks(r: TurnShape): number {
  return Math.floor(r.inputLength / TRACE_BLOCK_TOKENS);
}

function latestTurn(rows: readonly TurnShape[], candidates: readonly number[], r: TurnShape, k: number): number | null {
  for (let c = candidates.length - 1; c >= 0; c--) {
    const j = candidates[c] ?? -1;
    const p = rows[j];
    if (p && fullBlocks(p) === k && r.inputLength >= p.inputLength + p.outputLength && samePrefix(p.hashIds, r.hashIds, k)) return j;
  }
  return null;
}

function samePrefix(a: readonly number[], b: readonly number[], k: number): boolean {
  for (let i = 0; i < k; i++) if (a[i] !== b[i]) return false;
  return true;
}
