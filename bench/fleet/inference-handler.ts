import type { IncomingMessage, ServerResponse } from "node:http";
import { sendError, sendJson } from "./http-replies.ts";
import { InferenceJob, type JobSpec } from "./inference-job.ts";
import { poolingAnswer, type PoolingEndpoint } from "./pooling.ts";
import { textBlocks, tokenIdBlocks } from "./prompt-blocks.ts";
import { isRecord } from "./is-record.ts";
import { renderChat, renderCompletion, renderResponses, type RenderedPrompt } from "./prompt-render.ts";
import { RESPONSES_FORMAT, responsesEcho } from "./responses-format.ts";
import { SIM_FIELD, parseSimControls, type SimControls } from "./sim-controls.ts";
import { CHAT_FORMAT, COMPLETION_FORMAT, type WireFormat } from "./wire-format.ts";
import { later, type WorkerContext } from "./worker-context.ts";

/** Endpoints the engine generates for, token by token. */
type GenerationEndpoint = "chat" | "completions" | "responses";
export type Endpoint = GenerationEndpoint | PoolingEndpoint;

/** How a generation endpoint reads its request and writes its answer. */
interface Generation {
  format: WireFormat;
  render(body: Record<string, unknown>): RenderedPrompt;
  /** The body's fields that cap the output; the first one set counts, an error names the last. */
  limitFields: readonly string[];
  /** Request fields the answer repeats. */
  echo(body: Record<string, unknown>): string;
}

const noEcho = (): string => "";
const GENERATIONS: Readonly<Record<GenerationEndpoint, Generation>> = {
  chat: { format: CHAT_FORMAT, render: renderChat, limitFields: ["max_completion_tokens", "max_tokens"], echo: noEcho },
  completions: { format: COMPLETION_FORMAT, render: renderCompletion, limitFields: ["max_completion_tokens", "max_tokens"], echo: noEcho },
  responses: { format: RESPONSES_FORMAT, render: renderResponses, limitFields: ["max_output_tokens"], echo: responsesEcho },
};

function isGeneration(endpoint: Endpoint): endpoint is GenerationEndpoint {
  return Object.hasOwn(GENERATIONS, endpoint);
}

/**
 * An inference request once its body is read: validate as vLLM would, apply the test controls and
 * worker faults, then hand a generation to the engine, or answer a pooling request (embeddings,
 * rerank, score) after the prefill it costs.
 */
export function handleInference(
  ctx: WorkerContext,
  endpoint: Endpoint,
  req: IncomingMessage,
  res: ServerResponse,
  raw: Buffer,
): void {
  const fail = (status: number, message: string, param: string | null = null): void => {
    ctx.counters.errors++;
    sendError(res, status, message, ctx.headers, param);
  };

  let body: unknown = null;
  let parseError: string | undefined;
  try {
    body = raw.length > 0 ? JSON.parse(raw.toString("utf8")) : null;
  } catch (e) {
    parseError = e instanceof Error ? e.message : String(e);
  }
  ctx.log.record({ at: Date.now(), path: req.url ?? "", headers: req.headers, body });
  ctx.counters.requests++;
  if (parseError !== undefined) return fail(400, `Invalid JSON body: ${parseError}`);
  if (!isRecord(body)) return fail(400, "request body must be a JSON object");

  if (body.model !== undefined && body.model !== ctx.config.servedModelName) {
    return fail(404, `The model \`${typeof body.model === "string" ? body.model : JSON.stringify(body.model)}\` does not exist.`, "model");
  }
  const parsed = parseSimControls(body[SIM_FIELD]);
  if (!parsed.ok) return fail(400, parsed.message, SIM_FIELD);
  const controls = parsed.controls;

  let gone = false;
  res.once("close", () => (gone = true));
  const run = (): void => {
    if (gone) return;
    if (controls.failStatus !== undefined) {
      return fail(controls.failStatus, `simulated failure (${SIM_FIELD}.fail_status=${controls.failStatus})`);
    }
    if (ctx.faulty && ctx.dice.chance(ctx.config.faults.errorRate)) return fail(500, "simulated worker error (errorRate)");
    if (!isGeneration(endpoint)) return answerPooling(ctx, endpoint, body, controls, res, fail);
    const spec = jobSpec(ctx, GENERATIONS[endpoint], body, controls);
    if (typeof spec === "string") return fail(400, spec);
    const job = new InferenceJob(ctx, spec, res);
    if (ctx.cost.instant && spec.tokenIntervalMs === 0) return job.runNow();
    const ticket = ctx.scheduler.submit(job);
    res.once("close", () => {
      if (!job.settled) {
        job.settled = true;
        ticket.cancel();
      }
    });
  };
  if (controls.firstByteDelayMs > 0) later(ctx, controls.firstByteDelayMs, run);
  else run();
}

/**
 * A pooling answer, sent after one prefill step of the tokens it read. Test controls act as on a
 * non-streamed generation: fail_after_chunks cuts the connection, stall_after_chunks never answers.
 */
function answerPooling(
  ctx: WorkerContext,
  endpoint: PoolingEndpoint,
  body: Record<string, unknown>,
  controls: SimControls,
  res: ServerResponse,
  fail: (status: number, message: string) => void,
): void {
  const answer = poolingAnswer(ctx, endpoint, body);
  if (typeof answer === "string") return fail(400, answer);
  ctx.counters.promptTokens += answer.promptTokens;
  const send = (): void => {
    if (res.destroyed) return;
    if (controls.failAfterChunks !== undefined) return void res.destroy();
    if (controls.stallAfterChunks !== undefined) return;
    sendJson(res, 200, answer.body, ctx.headers);
  };
  const ms = ctx.cost.stepMs(answer.promptTokens, 1, 0, 0);
  if (ms > 0) later(ctx, ms, send);
  else send();
}

/** The request as the engine needs it, or the message of a 400. */
function jobSpec(ctx: WorkerContext, generation: Generation, body: Record<string, unknown>, controls: SimControls): JobSpec | string {
  const { format } = generation;
  const rendered = generation.render(body);
  if (!rendered.ok) return rendered.message;
  const promptText = "text" in rendered ? rendered.text : null;
  const prompt = "text" in rendered ? textBlocks(rendered.text) : tokenIdBlocks(rendered.tokenIds);
  // vLLM always feeds the model at least one token (BOS).
  if (prompt.tokens === 0) prompt.tokens = 1;

  let limitValue: unknown;
  for (const field of generation.limitFields) limitValue ??= body[field] ?? undefined;
  if (limitValue !== undefined && !(typeof limitValue === "number" && Number.isInteger(limitValue) && limitValue >= 1)) {
    return `${generation.limitFields.at(-1)} must be an integer of at least 1`;
  }
  const limit = limitValue;
  if (body.n !== undefined && body.n !== null && body.n !== 1) return "n > 1 is not supported by the simulator";
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean") return "stream must be a boolean";
  const priority = body.priority ?? 0;
  if (typeof priority !== "number" || !Number.isSafeInteger(priority)) return "priority must be an integer";
  // vLLM's own words, when it was not started with --scheduling-policy priority.
  if (priority !== 0 && ctx.config.schedulingPolicy !== "priority") return `Got priority ${String(priority)} but Priority scheduling is not enabled.`;

  const outputTokens = controls.tokens ?? limit ?? ctx.config.defaultMaxTokens;
  const { maxModelLen } = ctx.config.profile;
  if (prompt.tokens + outputTokens > maxModelLen) {
    return (
      `This model's maximum context length is ${maxModelLen} tokens. However, you requested ` +
      `${prompt.tokens + outputTokens} tokens (${prompt.tokens} in the messages, ${outputTokens} in the completion). ` +
      "Please reduce the length of the messages or completion."
    );
  }

  const { faults } = ctx.config;
  const streamOptions = body.stream_options;
  return {
    format,
    head: {
      id: `${format.idPrefix}sim${ctx.config.index}-${(ctx.nextId++).toString(36)}`,
      created: Math.floor(Date.now() / 1000),
      modelJson: ctx.modelJson,
      echoJson: generation.echo(body),
    },
    stream: body.stream === true,
    includeUsage: isRecord(streamOptions) && streamOptions.include_usage === true,
    prompt,
    promptText,
    outputTokens,
    // A model given no limit ends on its own (stop); one that reaches its limit is cut (length).
    finish: limit !== undefined && outputTokens >= limit ? "length" : "stop",
    failAfterChunks: controls.failAfterChunks,
    stallAfterChunks: controls.stallAfterChunks ?? (ctx.faulty && ctx.dice.chance(faults.stallRate) ? faults.stallAfterChunks : undefined),
    tokenIntervalMs: controls.chunkDelayMs,
    priority,
  };
}
