/**
 * The request path's work on a body, stage by stage, timed in Node with the gateway's own code:
 * what each stage costs, and where a body over a bound stops. Node runs the same V8 as workerd,
 * so the split is indicative; workerd's own CPU per request is measured through the gateway.
 */
import { performance } from "node:perf_hooks";
import { scanBody } from "../../src/openai/body-shape.ts";
import { chatLimitError } from "../../src/openai/request-limits.ts";
import { ChatCompletionRequestSchema, CompletionRequestSchema } from "../../src/openai/requests.ts";
import { chatFingerprint, completionFingerprint } from "../../src/prefix/fingerprint.ts";
import { GatewayConfigSchema } from "../../src/config/schema.ts";
import { median } from "../stats/quantiles.ts";
import type { InputShape } from "./bodies.ts";

export const STAGES = ["decode", "shape", "parse", "counts", "schema", "fingerprint", "serialise"] as const;
export type Stage = (typeof STAGES)[number];

/** Milliseconds per stage (median of `times`); a stage the body never reaches is absent. */
export type StageTimes = Partial<Record<Stage, number>>;

const { limits } = GatewayConfigSchema.parse({ modelGroups: [{ name: "g", deployments: [{ baseUrl: "http://x", model: "m" }] }] });
const FINGERPRINT = { blockChars: 64, maxBlocks: 2048 };
const utf8 = new TextDecoder("utf-8", { fatal: true });

function timed<T>(times: number, run: () => T): { ms: number; value: T } {
  const samples: number[] = [];
  let value = run(); // warm-up, and the value the next stage works on
  for (let i = 0; i < times; i++) {
    const t0 = performance.now();
    value = run();
    samples.push(performance.now() - t0);
  }
  return { ms: median(samples) as number, value };
}

type Run = <T>(name: Stage, run: () => T) => T;

export function stageTimes(shape: InputShape, times: number): StageTimes {
  const out: StageTimes = {};
  const stage: Run = (name, run) => {
    const r = timed(times, run);
    out[name] = r.ms;
    return r.value;
  };
  const bytes = new TextEncoder().encode(shape.text);
  const text = stage("decode", () => utf8.decode(bytes));
  if (stage("shape", () => scanBody(text).excess)) return out;
  const raw: unknown = stage("parse", () => JSON.parse(text));
  if (shape.path === "/v1/completions") return validated(raw, CompletionRequestSchema, completionFingerprint, stage, out);
  if (stage("counts", () => chatLimitError(raw, limits))) return out;
  return validated(raw, ChatCompletionRequestSchema, chatFingerprint, stage, out);
}

/** The schema, then (when it passes) the fingerprint and the upstream's copy of the body. */
function validated<T extends object>(
  raw: unknown,
  schema: { safeParse(v: unknown): { success: true; data: T } | { success: false } },
  fingerprint: (body: T, o: typeof FINGERPRINT) => number[],
  stage: Run,
  out: StageTimes,
): StageTimes {
  const r = stage("schema", () => schema.safeParse(raw));
  if (!r.success) return out;
  stage("fingerprint", () => fingerprint(r.data, FINGERPRINT));
  stage("serialise", () => JSON.stringify({ ...r.data, model: "upstream" }));
  return out;
}
