import type { ServerResponse } from "node:http";
import { sendJson } from "./http-replies.ts";
import { BLOCK_TOKENS } from "./presets.ts";
import { admitPrompt, cacheAnswer } from "./prompt-cache.ts";
import type { PromptBlocks } from "./prompt-blocks.ts";
import type { Sequence } from "./scheduler.ts";
import { SseWriter } from "./sse-writer.ts";
import type { FinishReason, ResponseHead, UsageCounts, WireFormat } from "./wire-format.ts";
import type { WorkerContext } from "./worker-context.ts";

export interface JobSpec {
  format: WireFormat;
  head: ResponseHead;
  stream: boolean;
  includeUsage: boolean;
  prompt: PromptBlocks;
  /** The rendered prompt, to cache the blocks of prompt + answer at the end; null for token ids. */
  promptText: string | null;
  outputTokens: number;
  finish: FinishReason;
  failAfterChunks: number | undefined;
  stallAfterChunks: number | undefined;
  tokenIntervalMs: number;
  /** The request's `priority` (0 when it set none): its place in a priority engine's queue. */
  priority: number;
}

/**
 * One request from admission to its last byte: asks the prefix cache what it can skip, writes
 * each token as an SSE event (or the whole body at the end), and applies the failure a test asked
 * for. The engine (BatchScheduler) decides when each of these happens.
 */
export class InferenceJob implements Sequence {
  readonly blocksNeeded: number;
  readonly outputTokens: number;
  readonly tokenIntervalMs: number;
  readonly priority: number;
  private readonly ctx: WorkerContext;
  private readonly spec: JobSpec;
  private readonly res: ServerResponse;
  private readonly sse: SseWriter | undefined;
  private tokenPrefix = "";
  private cachedTokens = 0;
  /** The response is over for the engine: ended, aborted, stalled or abandoned by the client. */
  settled = false;

  constructor(ctx: WorkerContext, spec: JobSpec, res: ServerResponse) {
    this.ctx = ctx;
    this.spec = spec;
    this.res = res;
    this.outputTokens = spec.outputTokens;
    this.tokenIntervalMs = spec.tokenIntervalMs;
    this.priority = spec.priority;
    this.blocksNeeded = Math.ceil((spec.prompt.tokens + spec.outputTokens) / BLOCK_TOKENS);
    if (spec.stream) {
      this.sse = new SseWriter(res);
      this.sse.open(ctx.headers);
      this.tokenPrefix = spec.format.tokenPrefix(spec.head);
    }
  }

  /** The whole request at once, for a zero-latency worker. */
  runNow(): void {
    this.admit();
    for (let i = 0; i < this.outputTokens; i++) if (!this.token(i)) return;
    this.finish();
  }

  admit(): number {
    const { prompt } = this.spec;
    this.cachedTokens = admitPrompt(this.ctx.cache, prompt);
    this.ctx.counters.promptTokens += prompt.tokens;
    this.ctx.counters.cachedTokens += this.cachedTokens;
    return prompt.tokens - this.cachedTokens;
  }

  token(index: number): boolean {
    if (this.settled) return false;
    this.ctx.counters.generationTokens++;
    const { sse, spec } = this;
    if (!sse) return true;
    if (index === 0) {
      const role = spec.format.roleEvent(spec.head);
      if (role) sse.send(role);
    }
    if (spec.failAfterChunks !== undefined && index >= spec.failAfterChunks) {
      this.abort();
      return false;
    }
    if (spec.stallAfterChunks !== undefined && index >= spec.stallAfterChunks) {
      this.settled = true;
      return false;
    }
    sse.send(spec.format.tokenEvent(this.tokenPrefix, index, index === this.outputTokens - 1 ? spec.finish : null));
    return true;
  }

  finish(): void {
    if (this.settled) return;
    this.cacheAnswer();
    const { spec } = this;
    if (spec.failAfterChunks !== undefined) return this.abort();
    this.settled = true;
    if (spec.stallAfterChunks !== undefined) return;
    const usage: UsageCounts = {
      promptTokens: spec.prompt.tokens,
      completionTokens: this.outputTokens,
      cachedTokens: this.cachedTokens,
    };
    if (this.sse) {
      this.sse.end(spec.format.streamEnd(spec.head, this.outputTokens, spec.finish, usage, spec.includeUsage));
    } else {
      sendJson(this.res, 200, spec.format.body(spec.head, this.outputTokens, spec.finish, usage), this.ctx.headers);
    }
  }

  private cacheAnswer(): void {
    const { promptText, prompt } = this.spec;
    if (promptText !== null) cacheAnswer(this.ctx.cache, promptText, prompt, this.outputTokens);
  }

  private abort(): void {
    this.settled = true;
    const socket = this.res.socket;
    if (!socket) return;
    // Node corks a response's socket until the next tick, and destroying it discards what is
    // still buffered: the events a test asked to see first. Destroy once they are flushed.
    socket.uncork();
    socket.write("", () => socket.destroy());
  }
}
