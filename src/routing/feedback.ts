import { CharsPerTokenLearner } from "./learned/chars-per-token.ts";
import { KvCapacityLearner } from "./learned/kv-capacity.ts";
import { PrefillRateLearner } from "./learned/prefill-rate.ts";
import type { TokenUsage } from "./protocol.ts";

/**
 * Feedback from the engines: what one backend's answers teach the router about it. Each release
 * whose usage the Worker read (a virtual key that counts tokens, or a request the group's
 * `feedback.sampleRate` picked) is a report. From every report: the characters per token (the
 * chain's characters over the prompt tokens). From a report that carries the engine's cached
 * tokens (vLLM with --enable-prompt-tokens-details, SGLang with --enable-cache-report, llama.cpp,
 * the simulator): the effective KV capacity, and the prefill rate from the TTFT of a streamed
 * answer and the tokens it did not find cached. Without a cache report there is no capacity
 * evidence, and no telling how much of the prompt was prefilled; a reported 0 is evidence.
 * Each learner is bounded and damped (src/routing/learned/); the router uses their figures
 * wherever it turns blocks into tokens, sizes a prefix set, or drains prefill debt.
 */

export interface FeedbackReport {
  usage: TokenUsage;
  /** The time to the first token of a streamed answer; absent for a non-streamed one (its headers come with the whole answer). */
  firstTokenMs: number | undefined;
  /**
   * Leading blocks of the chain the backend's prefix set matched when the request was routed; −1
   * when part of that match was still being prefilled then (src/routing/pending-prefills.ts): the
   * engine may have computed it again, so what it reports is no evidence of the set's size.
   */
  matched: number;
  /** The chain's blocks; −1 when the fingerprint stopped at maxPrefixBlocks (the prompt went on) or the prompt held media: no measure of its characters. */
  total: number;
  /** Where the match stood in the prefix set's eviction order when it was routed (PrefixSet.matchRecency): 0 just used, ~1 about to go; NaN when unknown. */
  recency: number;
  /**
   * Blocks of prompt work the router estimated queued ahead of it on the backend when it was
   * routed. Only a request with little ahead (under a block, or a quarter of its own prefill)
   * teaches the prefill rate: one that waited behind others' prefill has that wait in its TTFT,
   * and in a burst the long prompts wait the longest, so their TTFTs climb with their size and
   * read as a slow rate (a conversation trace's opening burst taught 3,457 tokens/s of an
   * engine's 22,936, in virtual time). The estimate drains at the rate itself, but a release
   * clamps it by what its answer proves prefilled, so a wrong rate does not keep every request
   * looking queued; the quarter lets a long prompt teach under a steady load.
   */
  aheadBlocks: number;
  blockChars: number;
  setSize: number;
  setCapacity: number;
}

/** What a report changed: the capacity (the prefix sets are shared out again), or a rate the drain uses. */
export interface FeedbackChange {
  capacity: boolean;
  rates: boolean;
}

/** The learned figures, as the dashboard and GET /v1/kvgate/status show them. */
export interface LearnedSnapshot {
  charsPerToken: number;
  kvCapacityBlocks: number;
  prefillTokensPerSec: number;
  configured: { kvCapacityBlocks: number; prefillTokensPerSec: number };
  /** Releases that carried usage, and those of them with the engine's cached-token report. */
  reports: { usage: number; cached: number };
  capacitySteps: number;
}

/**
 * The learned figures in the routing object's affinity snapshot: a tag no hash or count can be
 * (not an integer), then the values. Appended after the prefix set's own numbers, where an older
 * reader stops (it reads the tag as a segment that does not parse).
 */
const LEARNED_TAG = 7.125;
/** A request with more prompt work queued ahead than this share of its own does not teach the prefill rate (FeedbackReport.aheadBlocks). */
const AHEAD_SHARE = 0.25;
const SAVED_LENGTH = 5;

export class BackendFeedback {
  readonly charsPerToken = new CharsPerTokenLearner();
  readonly capacity: KvCapacityLearner;
  readonly prefillRate: PrefillRateLearner;
  private usageReports = 0;
  private cacheReports = 0;
  /** It has something to save: a report came, or a snapshot was restored. */
  private known = false;

  constructor(kvCapacityBlocks: number, prefillTokensPerSec: number) {
    this.capacity = new KvCapacityLearner(kvCapacityBlocks);
    this.prefillRate = new PrefillRateLearner(prefillTokensPerSec);
  }

  configure(kvCapacityBlocks: number, prefillTokensPerSec: number): void {
    this.capacity.configure(kvCapacityBlocks);
    this.prefillRate.configure(prefillTokensPerSec);
  }

  report(r: FeedbackReport): FeedbackChange {
    const u = r.usage;
    this.usageReports++;
    this.known = true;
    let rates = r.total > 0 && this.charsPerToken.observe(r.total * r.blockChars, u.prompt);
    if (u.cacheReported !== true) return { capacity: false, rates };
    this.cacheReports++;
    const blocksPerToken = this.charsPerToken.value / r.blockChars;
    const capacity = r.matched >= 0 && this.capacity.observe({
      matched: r.matched,
      total: Math.max(r.total, r.matched),
      recency: r.recency,
      cachedBlocks: u.cached * blocksPerToken,
      answerBlocks: u.completion * blocksPerToken,
      setSize: r.setSize,
      setCapacity: r.setCapacity,
    });
    const prefilled = u.prompt - u.cached;
    const unqueued = r.aheadBlocks <= Math.max(1, AHEAD_SHARE * prefilled * blocksPerToken);
    if (r.firstTokenMs !== undefined && unqueued && this.prefillRate.observe(prefilled, r.firstTokenMs)) rates = true;
    return { capacity, rates };
  }

  snapshot(): LearnedSnapshot {
    return {
      charsPerToken: round3(this.charsPerToken.value),
      kvCapacityBlocks: this.capacity.blocks,
      prefillTokensPerSec: Math.round(this.prefillRate.tokensPerSec),
      configured: { kvCapacityBlocks: this.capacity.configuredBlocks, prefillTokensPerSec: this.prefillRate.configuredRate },
      reports: { usage: this.usageReports, cached: this.cacheReports },
      capacitySteps: this.capacity.steps,
    };
  }

  /** Its figures for the snapshot; nothing before the first report (an old snapshot's shape). */
  saved(): number[] {
    if (!this.known) return [];
    return [LEARNED_TAG, this.charsPerToken.value, this.charsPerToken.samples, this.capacity.learnedBlocks ?? 0, this.prefillRate.learnedRate ?? 0];
  }

  /** Takes back what saved() wrote, if `saved` ends with it; returns the length of what comes before (the prefix set's part). */
  restore(saved: Float64Array): number {
    const at = saved.length - SAVED_LENGTH;
    if (at < 0 || saved[at] !== LEARNED_TAG) return saved.length;
    this.charsPerToken.restore(saved[at + 1] as number, saved[at + 2] as number);
    this.capacity.restore(saved[at + 3] as number);
    this.prefillRate.restore(saved[at + 4] as number);
    this.known = true;
    return at;
  }
}

const round3 = (x: number): number => Math.round(x * 1000) / 1000;
