import { costModel } from "../fleet/cost-model.ts";
import { PrefixCache } from "../fleet/kv-cache.ts";
import { BLOCK_TOKENS, type GpuProfile } from "../fleet/presets.ts";
import { textBlocks, type PromptBlocks } from "../fleet/prompt-blocks.ts";
import { admitPrompt, cacheAnswer } from "../fleet/prompt-cache.ts";
import { BatchScheduler, type SchedulingPolicy, type Sequence, type Ticket } from "../fleet/scheduler.ts";

/** What a generation tells its caller: its first token, and its end with the engine's usage. */
export interface GenerationEvents {
  firstToken(): void;
  done(usage: { prompt: number; cached: number; completion: number }): void;
}

/**
 * One simulated GPU worker without its HTTP server: the fleet simulator's own engine
 * (BatchScheduler, the cost model) and prefix cache (PrefixCache), given prompts as the worker's
 * handler renders them. What a request costs and what it finds cached are the simulator's; only
 * the socket is gone.
 */
export class VirtualWorker {
  private readonly cache: PrefixCache;
  private readonly scheduler: BatchScheduler;

  constructor(profile: GpuProfile, policy: SchedulingPolicy = "fcfs") {
    this.cache = new PrefixCache(profile.kvCapacityBlocks);
    this.scheduler = new BatchScheduler(costModel(profile, 1), profile, policy);
  }

  /** `promptText`: the prompt as the simulator renders it (renderChat); `priority`: the request's field, when it set one. */
  generate(promptText: string, outputTokens: number, events: GenerationEvents, priority?: number): Ticket {
    return this.scheduler.submit(new Generation(this.cache, promptText, textBlocks(promptText), outputTokens, events, priority));
  }
}

/** A streamed generation, as bench/fleet/inference-job.ts runs one, with no bytes to write. */
class Generation implements Sequence {
  readonly blocksNeeded: number;
  readonly tokenIntervalMs = 0;
  readonly outputTokens: number;
  readonly priority: number | undefined;
  private readonly cache: PrefixCache;
  private readonly promptText: string;
  private readonly prompt: PromptBlocks;
  private readonly events: GenerationEvents;
  private cached = 0;

  constructor(cache: PrefixCache, promptText: string, prompt: PromptBlocks, outputTokens: number, events: GenerationEvents, priority: number | undefined) {
    this.priority = priority;
    this.cache = cache;
    this.promptText = promptText;
    this.prompt = prompt;
    this.outputTokens = outputTokens;
    this.events = events;
    this.blocksNeeded = Math.ceil((prompt.tokens + outputTokens) / BLOCK_TOKENS);
  }

  admit(): number {
    this.cached = admitPrompt(this.cache, this.prompt);
    return this.prompt.tokens - this.cached;
  }

  token(index: number): boolean {
    if (index === 0) this.events.firstToken();
    return true;
  }

  finish(): void {
    cacheAnswer(this.cache, this.promptText, this.prompt, this.outputTokens);
    this.events.done({ prompt: this.prompt.tokens, cached: this.cached, completion: this.outputTokens });
  }
}
