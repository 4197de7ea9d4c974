/**
 * Every knob of the trace generator, with its default. Sizes of long texts are in KB (1,024
 * bytes; the text is ASCII, so bytes = characters, and the simulated model counts 4 bytes as one
 * token). A benchmark asks for a "pressured" variant — longer contexts, bigger documents, more
 * sessions — by overriding fields here, with no new code.
 */
export interface TraceParams {
  /** PRNG seed: the same seed gives the same trace, byte for byte. */
  seed: number;
  /** Sessions; a replay runs them all at once. */
  sessions: number;
  /** Turns per session, in order. For kinds of independent requests, requests per session. */
  turns: number;
  /** max_tokens of every request. */
  maxTokens: number;
  /** Length of a user message, in characters: multi-turn turns, rag and hot-prefix questions, the tool-loop task. */
  userMinChars: number;
  userMaxChars: number;

  /** multi-turn: the system prompt every session shares. */
  systemKB: number;
  /** multi-turn: a document unique to each session, pasted into its first user turn (0 = none). */
  documentKB: number;

  /** rag: the system prompt every request shares. */
  ragSystemKB: number;
  /** rag: documents in the pool. */
  ragDocs: number;
  ragDocMinKB: number;
  ragDocMaxKB: number;
  /** rag: documents per request, drawn without repeats. */
  ragDocsPerRequestMin: number;
  ragDocsPerRequestMax: number;
  /** rag: popularity of the k-th most popular document ∝ 1 / k^exponent (0 = uniform). */
  ragZipfExponent: number;

  /** tool-loop: the system prompt with the tool definitions (JSON schemas), shared by all sessions. */
  toolSchemaKB: number;
  /** tool-loop: size of each tool result. */
  toolResultMinKB: number;
  toolResultMaxKB: number;

  /** single-turn, and hot-prefix's unique requests: size of a unique prompt. */
  promptMinKB: number;
  promptMaxKB: number;

  /** hot-prefix: the long prefix (a system prompt) most requests share. */
  hotPrefixKB: number;
  /** hot-prefix: fraction of requests that use it; the rest are unique prompts. */
  hotShare: number;
}

export type TraceOptions = Partial<TraceParams>;

export const TRACE_DEFAULTS: Readonly<TraceParams> = {
  seed: 1,
  sessions: 8,
  turns: 8,
  maxTokens: 64,
  userMinChars: 100,
  userMaxChars: 400,
  systemKB: 6,
  documentKB: 0,
  ragSystemKB: 1,
  ragDocs: 24,
  ragDocMinKB: 2,
  ragDocMaxKB: 4,
  ragDocsPerRequestMin: 1,
  ragDocsPerRequestMax: 3,
  ragZipfExponent: 1,
  toolSchemaKB: 4,
  toolResultMinKB: 1,
  toolResultMaxKB: 2,
  promptMinKB: 1,
  promptMaxKB: 3,
  hotPrefixKB: 8,
  hotShare: 0.9,
};

export const KB = 1024;

export function kbToBytes(kb: number): number {
  return Math.round(kb * KB);
}

const INTEGER_KEYS: ReadonlySet<keyof TraceParams> = new Set<keyof TraceParams>([
  "seed",
  "sessions",
  "turns",
  "maxTokens",
  "userMinChars",
  "userMaxChars",
  "ragDocs",
  "ragDocsPerRequestMin",
  "ragDocsPerRequestMax",
]);

const AT_LEAST_ONE: ReadonlySet<keyof TraceParams> = new Set<keyof TraceParams>([
  "sessions",
  "turns",
  "maxTokens",
  "userMinChars",
  "ragDocs",
  "ragDocsPerRequestMin",
]);

const MIN_MAX_PAIRS: readonly [keyof TraceParams, keyof TraceParams][] = [
  ["userMinChars", "userMaxChars"],
  ["ragDocMinKB", "ragDocMaxKB"],
  ["ragDocsPerRequestMin", "ragDocsPerRequestMax"],
  ["toolResultMinKB", "toolResultMaxKB"],
  ["promptMinKB", "promptMaxKB"],
];

/** The defaults with `options` over them; throws a RangeError naming every bad field. */
export function resolveTraceOptions(options: TraceOptions = {}): TraceParams {
  const params: TraceParams = { ...TRACE_DEFAULTS };
  const errors: string[] = [];
  for (const [key, value] of Object.entries(options)) {
    if (!(key in TRACE_DEFAULTS)) errors.push(`unknown trace option ${key}`);
    else if (value !== undefined) Object.assign(params, { [key]: value });
  }
  for (const key of Object.keys(TRACE_DEFAULTS) as (keyof TraceParams)[]) {
    const value = params[key];
    if (typeof value !== "number" || !Number.isFinite(value) || value < 0) errors.push(`${key} must be a number ≥ 0`);
    else if (INTEGER_KEYS.has(key) && !Number.isInteger(value)) errors.push(`${key} must be an integer`);
    else if (AT_LEAST_ONE.has(key) && value < 1) errors.push(`${key} must be at least 1`);
  }
  for (const [min, max] of MIN_MAX_PAIRS) {
    if (params[min] > params[max]) errors.push(`${min} must not exceed ${max}`);
  }
  if (params.hotShare > 1) errors.push("hotShare must be at most 1");
  if (params.ragDocsPerRequestMax > params.ragDocs) errors.push("ragDocsPerRequestMax must not exceed ragDocs");
  if (errors.length > 0) throw new RangeError(errors.join("; "));
  return params;
}
