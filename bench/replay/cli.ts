import { numberFlag, parseFlags, positiveInt, positiveNumber, UsageError } from "../harness/argv.ts";
import { runCli } from "../harness/cli.ts";
import { TIMED_KINDS, TRACE_DEFAULTS, TRACE_KINDS, generateTrace, type TraceKind } from "../traces/index.ts";
import { TIMED_FLAGS, number } from "../traces/timed-flags.ts";
import { startFleet } from "../fleet/index.ts";
import { runOpenLoopCli } from "./open-loop-cli.ts";
import { replay } from "./replay.ts";
import { summarize } from "./stats.ts";

/**
 * Replays a trace and prints the summary as JSON. Without --base-url it starts a one-worker fleet
 * (preset --preset) in this process, for a smoke run: it shares the event loop with the client,
 * so for numbers start the fleet apart (`npm run fleet`) and pass --base-url.
 *
 * Session traces, closed loop (each session's turns one after another):
 *   node bench/replay/cli.ts --kind multi-turn --sessions 16 --base-url http://127.0.0.1:8787 --api-key $KEY
 *   node bench/replay/cli.ts --kind rag --sessions 64 --preset instant
 * Trace options: --seed, --sessions, --turns, and --trace key=value for any other TRACE_DEFAULTS field.
 *
 * Open-loop traces (mooncake, b2b-saas), each request at its arrival time:
 *   node bench/replay/cli.ts --kind mooncake --file conversation --minutes 10 --load 0.8 --preset a100-7b \
 *     --base-url http://127.0.0.1:8787 --api-key $KEY --metrics-url http://127.0.0.1:9001 ...
 *   node bench/replay/cli.ts --kind b2b-saas --b2b rateScale=0.62 --b2b stages=9 --base-url ...
 * Arrivals: the trace's times at --speed (default 1), or Poisson at --rate (seeded by --seed);
 * --load L derives the speed (with --poisson, the rate) that puts a fleet of --workers × --preset
 * at --time-scale at load L. Bounds: --max-in-flight (default 1024; more are counted as overflow),
 * --max-duration-s. Goodput's objective: --slo-ttft-ms (default 2000). --metrics-url (repeatable)
 * names the workers whose queues are sampled.
 */
const USAGE = "--kind KIND [--base-url URL] [--sessions N] ... (see the comment at its top)";

await runCli(
  "replay",
  async () => {
    const values = parseFlags(
      process.argv.slice(2),
      {
        ...TIMED_FLAGS,
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
        speed: { type: "string" },
        rate: { type: "string" },
        poisson: { type: "boolean" },
        "max-in-flight": { type: "string" },
        "max-duration-s": { type: "string" },
        "slo-ttft-ms": { type: "string" },
        "metrics-url": { type: "string", multiple: true, default: [] },
        "metrics-interval-ms": { type: "string" },
      },
      USAGE,
    );

    const timedKind = TIMED_KINDS.find((k) => k === values.kind);
    if (timedKind) {
      await runOpenLoopCli(timedKind, values);
    } else {
      const kind = TRACE_KINDS.find((k) => k === values.kind);
      if (!kind) throw new UsageError(`--kind must be one of ${[...TRACE_KINDS, ...TIMED_KINDS].join(", ")}`);
      const options: Record<string, number> = {};
      const seed = number("seed", values.seed);
      if (seed !== undefined) options.seed = seed;
      for (const key of ["sessions", "turns"] as const) {
        const text = values[key];
        if (text !== undefined) options[key] = positiveInt(`--${key}`, text);
      }
      for (const pair of values.trace) {
        const [key = "", value = ""] = pair.split("=");
        if (!(key in TRACE_DEFAULTS)) throw new UsageError(`--trace: unknown trace option ${key} (one of ${Object.keys(TRACE_DEFAULTS).join(", ")})`);
        options[key] = numberFlag(`--trace ${key}`, value);
      }

      const trace = generateTrace(kind satisfies TraceKind, options);
      const presetName = values.preset === "a100-7b" || values.preset === "l4-7b" ? values.preset : "instant";
      const fleet = values["base-url"] ? undefined : await startFleet({ workers: 1, basePort: 0, preset: presetName });
      try {
        const result = await replay(trace, {
          baseUrl: values["base-url"] ?? fleet?.urls[0] ?? "",
          model: values.model,
          ...(values["api-key"] ? { apiKey: values["api-key"] } : {}),
          ...(values["timeout-ms"] ? { timeoutMs: positiveNumber("--timeout-ms", values["timeout-ms"]) } : {}),
        });
        const firstError = result.requests.find((r) => r.error !== null)?.error ?? null;
        console.log(JSON.stringify({ kind, params: trace.params, wall_ms: Math.round(result.wallMs), ...summarize(result), first_error: firstError }, null, 2));
      } finally {
        await fleet?.close();
      }
    }
  },
  "node bench/replay/cli.ts",
);
