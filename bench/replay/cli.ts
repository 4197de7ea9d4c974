import { parseArgs } from "node:util";
import { TRACE_DEFAULTS, TRACE_KINDS, generateTrace, type TraceKind } from "../traces/index.ts";
import { startFleet } from "../fleet/index.ts";
import { replay } from "./replay.ts";
import { summarize } from "./stats.ts";

/**
 * Replays a generated trace and prints the summary as JSON. Without --base-url it starts a
 * one-worker fleet (preset --preset) in this process, for a smoke run: it shares the event loop
 * with the client, so for numbers start the fleet apart (`npm run fleet`) and pass --base-url.
 *
 *   node bench/replay/cli.ts --kind multi-turn --sessions 16 --base-url http://127.0.0.1:8787 --api-key $KEY
 *   node bench/replay/cli.ts --kind rag --sessions 64 --preset instant
 *
 * Trace options: --seed, --sessions, --turns, and --trace key=value for any other TRACE_DEFAULTS field.
 */
const { values } = parseArgs({
  options: {
    kind: { type: "string", default: "multi-turn" },
    "base-url": { type: "string" },
    model: { type: "string", default: "kvgate-sim" },
    "api-key": { type: "string" },
    preset: { type: "string", default: "instant" },
    seed: { type: "string" },
    sessions: { type: "string" },
    turns: { type: "string" },
    trace: { type: "string", multiple: true, default: [] },
    "timeout-ms": { type: "string" },
  },
});

const kind = TRACE_KINDS.find((k) => k === values.kind);
if (!kind) throw new Error(`--kind must be one of ${TRACE_KINDS.join(", ")}`);
const options: Record<string, number> = {};
for (const key of ["seed", "sessions", "turns"] as const) if (values[key] !== undefined) options[key] = Number(values[key]);
for (const pair of values.trace) {
  const [key = "", value = ""] = pair.split("=");
  if (!(key in TRACE_DEFAULTS)) throw new Error(`unknown trace option ${key}`);
  options[key] = Number(value);
}

const trace = generateTrace(kind satisfies TraceKind, options);
const presetName = values.preset === "a100-7b" || values.preset === "l4-7b" ? values.preset : "instant";
const fleet = values["base-url"] ? undefined : await startFleet({ workers: 1, basePort: 0, preset: presetName });
try {
  const result = await replay(trace, {
    baseUrl: values["base-url"] ?? fleet?.urls[0] ?? "",
    model: values.model,
    ...(values["api-key"] ? { apiKey: values["api-key"] } : {}),
    ...(values["timeout-ms"] ? { timeoutMs: Number(values["timeout-ms"]) } : {}),
  });
  const firstError = result.requests.find((r) => r.error !== null)?.error ?? null;
  console.log(JSON.stringify({ kind, params: trace.params, wall_ms: Math.round(result.wallMs), ...summarize(result), first_error: firstError }, null, 2));
} finally {
  await fleet?.close();
}
