import { writeFileSync } from "node:fs";
import { KB } from "./options.ts";
import { TRACE_DEFAULTS, TRACE_KINDS, generateTrace, traceFootprint, type TraceKind, type TraceOptions } from "./index.ts";

/**
 * Generates a trace and prints its size and how long generation took; `--out` writes it as JSON.
 *
 *   node bench/traces/cli.ts multi-turn --sessions 64 --document-kb 16 [--out trace.json]
 *
 * Every field of TRACE_DEFAULTS is a flag, in kebab-case or camelCase.
 */

function parseArgs(argv: readonly string[]): { kind: TraceKind; options: TraceOptions; out: string | undefined } {
  const [kindArg, ...rest] = argv;
  const kind = TRACE_KINDS.find((k) => k === kindArg);
  if (!kind) throw new Error(`usage: cli.ts <${TRACE_KINDS.join("|")}> [--option value]... [--out file]`);
  const options: Record<string, number> = {};
  let out: string | undefined;
  for (let i = 0; i < rest.length; i += 2) {
    const flag = (rest[i] ?? "").replace(/^--/, "");
    const value = rest[i + 1] ?? "";
    if (flag === "out") {
      out = value;
      continue;
    }
    const key = flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase()).replace(/Kb$/, "KB");
    if (!(key in TRACE_DEFAULTS)) throw new Error(`unknown option --${flag}`);
    options[key] = Number(value);
  }
  return { kind, options, out };
}

const { kind, options, out } = parseArgs(process.argv.slice(2));
const started = performance.now();
const trace = generateTrace(kind, options);
const generationMs = performance.now() - started;
// Not part of generation: the footprint renders and hashes every request, as the fleet would.
const f = traceFootprint(trace);
const size = (tokens: number): string => `${((tokens * 4) / KB).toFixed(1)} KB (${tokens} tokens)`;
console.log(`${kind}: ${f.sessions} sessions, ${f.requests} requests, generated in ${generationMs.toFixed(1)} ms`);
console.log(`  shared blocks:               ${size(f.sharedTokens)}`);
console.log(`  private blocks per session:  ${size(Math.round(f.privateTokens / Math.max(1, f.sessions)))}`);
console.log(`  working set (all sessions):  ${size(f.sharedTokens + f.privateTokens)}`);
console.log(`  prompt mean / max:           ${size(f.meanPromptTokens)} / ${size(f.maxPromptTokens)}`);
console.log(`  params: ${JSON.stringify(trace.params)}`);
if (out) writeFileSync(out, JSON.stringify(trace));
