import { isRecord } from "./is-record.ts";

/**
 * Per-request test controls, read from the `kvgate_sim` object of a request body. A gateway
 * passes unknown body fields through untouched, so a test drives a worker's failures through
 * the gateway with them. They work in every preset.
 */
export interface SimControls {
  /** Respond with this HTTP status (400–599) and an OpenAI error body. */
  failStatus: number | undefined;
  /** Stream: send this many content events, then destroy the socket (no [DONE]). Non-stream: destroy it instead of responding. */
  failAfterChunks: number | undefined;
  /** Stream: send this many content events, then stop sending and keep the connection open. Non-stream: never respond. */
  stallAfterChunks: number | undefined;
  /** Fixed delay between streamed content events; replaces the GPU's decode pacing. */
  chunkDelayMs: number;
  /** Delay before anything happens, response headers included. */
  firstByteDelayMs: number;
  /** Output tokens, overriding max_tokens. */
  tokens: number | undefined;
}

export const NO_CONTROLS: Readonly<SimControls> = {
  failStatus: undefined,
  failAfterChunks: undefined,
  stallAfterChunks: undefined,
  chunkDelayMs: 0,
  firstByteDelayMs: 0,
  tokens: undefined,
};

export const SIM_FIELD = "kvgate_sim";

const KNOWN_KEYS = new Set([
  "fail_status",
  "fail_after_chunks",
  "stall_after_chunks",
  "chunk_delay_ms",
  "first_byte_delay_ms",
  "tokens",
]);

export type ParsedControls = { ok: true; controls: Readonly<SimControls> } | { ok: false; message: string };

export function parseSimControls(value: unknown): ParsedControls {
  if (value === undefined || value === null) return { ok: true, controls: NO_CONTROLS };
  if (!isRecord(value)) return { ok: false, message: `${SIM_FIELD} must be an object` };
  const v = value;
  // A misspelt control would otherwise be ignored and the test would pass for the wrong reason.
  const errors = Object.keys(v)
    .filter((key) => !KNOWN_KEYS.has(key))
    .map((key) => `unknown field ${SIM_FIELD}.${key}`);
  const int = (key: string, min: number, max: number): number | undefined => {
    const x = v[key];
    if (x === undefined || x === null) return undefined;
    if (typeof x !== "number" || !Number.isInteger(x) || x < min || x > max) {
      errors.push(`${SIM_FIELD}.${key} must be an integer from ${min} to ${max}`);
      return undefined;
    }
    return x;
  };
  const controls: SimControls = {
    failStatus: int("fail_status", 400, 599),
    failAfterChunks: int("fail_after_chunks", 0, Number.MAX_SAFE_INTEGER),
    stallAfterChunks: int("stall_after_chunks", 0, Number.MAX_SAFE_INTEGER),
    chunkDelayMs: int("chunk_delay_ms", 0, 600_000) ?? 0,
    firstByteDelayMs: int("first_byte_delay_ms", 0, 600_000) ?? 0,
    tokens: int("tokens", 1, 1_000_000),
  };
  return errors.length > 0 ? { ok: false, message: errors.join("; ") } : { ok: true, controls };
}
