import type { ResolvedDeployment, ResolvedGroup } from "../config/load.ts";
import { fnv1a64 } from "../fnv64.ts";
import { BackendCounters, type BackendMetrics } from "../metrics/backend-counters.ts";
import { Breaker, type BreakerState } from "./breaker.ts";
import { BackendFeedback, type FeedbackChange, type FeedbackReport } from "./feedback.ts";
import { PendingPrefills } from "./pending-prefills.ts";
import { PrefixSet } from "./prefix-set.ts";
import type { BackendSnapshot } from "./protocol.ts";
import type { Candidate } from "./policy.ts";

/**
 * What makes two config versions' deployments the same server: its id and its URL. State is kept
 * per key, so versions that name the same server share its in-flight count, prefix set and
 * breaker, and a server that moved to another URL under the same id starts afresh.
 */
export function backendKey(id: string, baseUrl: string): string {
  return fnv1a64(`${id}\n${baseUrl}`);
}

/** A breaker as persisted, with the server's rest after a 429: the id and URL say which server it judged. */
export interface SavedBreaker {
  id: string;
  baseUrl: string;
  state: BreakerState;
  since: number;
  opened: number;
  /** Opened by silence (Breaker.silent); absent in one saved before it was kept. */
  silent?: boolean;
  /** Backend.restingUntil when saved (past or not), once it rested; absent in one saved before it was kept. */
  restingUntil?: number;
}

/** One server's routing state, whichever config versions name it. */
export class Backend implements Candidate {
  readonly key: string;
  readonly id: string;
  readonly baseUrl: string;
  inFlight = 0;
  /** The cap of the version being routed for: set for each call. */
  maxInFlight = 0;
  weight = 1;
  readonly prefixes: PrefixSet;
  /** What of its prefix set is still being prefilled. */
  readonly pending = new PendingPrefills();
  prefillDebt = 0;
  debtAt = 0;
  /** Blocks of prompt work ever queued here: a lease's place in the queue is this count just after its own blocks. */
  queued = 0;
  available = true;
  /** The newest version names it as active: it may take new requests. */
  admitted = true;
  /** Until when it asked to be left alone (epoch ms): a 429's Retry-After. */
  restingUntil = 0;
  /** The restingUntil last saved with its breaker: a rest that goes past it by more than REST_SAVE_SLACK_MS is saved. */
  savedRestingUntil = 0;
  readonly breaker: Breaker;
  nextProbeAt = 0;
  probeUrl = "";
  probeIntervalMs = 0;
  probeTimeoutMs = 0;
  /** Prompt blocks it drains per millisecond. */
  drainPerMs = 0;
  blockChars = 0;
  /** What its answers taught the router (characters per token, effective KV capacity, prefill rate), beside what was configured. */
  readonly feedback: BackendFeedback;
  /** What its leases did: outcomes, reasons, latencies, tokens. */
  readonly counters = new BackendCounters();
  ttftEwmaMs: number | null = null;
  /** When a lease's release last said it served (an answer, a streamed first token): epoch ms, −Infinity for never (src/routing/silence.ts). */
  servedAt = -Infinity;
  /** Changed since last saved; `breakerFrom`: the state it left then. */
  breakerDirty = false;
  breakerFrom: BreakerState | null = null;
  affinityDirty = false;

  get cacheFill(): number {
    return this.prefixes.size / this.prefixes.capacity;
  }

  constructor(d: ResolvedDeployment, g: ResolvedGroup) {
    this.key = backendKey(d.id, d.baseUrl);
    this.id = d.id;
    this.baseUrl = d.baseUrl;
    this.prefixes = new PrefixSet(d.kvCapacityBlocks);
    this.breaker = new Breaker(g.breaker);
    this.feedback = new BackendFeedback(d.kvCapacityBlocks, d.prefillTokensPerSec);
    this.configure(d, g);
  }

  /** Takes the settings of a version that names this server (the newest one wins). */
  configure(d: ResolvedDeployment, g: ResolvedGroup): void {
    this.breaker.configure(g.breaker);
    this.probeUrl = this.baseUrl + g.breaker.probePath;
    this.probeIntervalMs = g.breaker.probeIntervalMs;
    this.probeTimeoutMs = g.breaker.probeTimeoutMs;
    this.blockChars = g.blockChars;
    this.feedback.configure(d.kvCapacityBlocks, d.prefillTokensPerSec);
    this.rate();
  }

  /** The KV capacity its prefix set is sized by: learned from its answers, else as configured. */
  get capacityBlocks(): number {
    return this.feedback.capacity.blocks;
  }

  get charsPerToken(): number {
    return this.feedback.charsPerToken.value;
  }

  /** The prompt tokens `blocks` hash blocks stand for, by its characters per token. */
  tokensOf(blocks: number): number {
    return (blocks * this.blockChars) / this.charsPerToken;
  }

  /** Takes one release's usage as feedback; what changed (a capacity change is the router's to share out). */
  learn(r: Omit<FeedbackReport, "blockChars" | "setSize" | "setCapacity">): FeedbackChange {
    const change = this.feedback.report({ ...r, blockChars: this.blockChars, setSize: this.prefixes.size, setCapacity: this.prefixes.capacity });
    if (change.rates) this.rate();
    return change;
  }

  /** Borrows its group's learned prefill rate (PrefillRateLearner.borrow): a factor of its configured rate, null when none learned one. */
  borrowRate(factor: number | null): void {
    if (this.feedback.prefillRate.borrow(factor)) this.rate();
  }

  /** Takes back the figures of an affinity snapshot (BackendFeedback.restore), and drains by them; the length of the snapshot's prefix-set part. */
  restoreLearned(saved: Float64Array): number {
    const setLength = this.feedback.restore(saved);
    this.rate();
    return setLength;
  }

  /** The prefill drain in blocks per millisecond, from its prefill rate and characters per token. */
  private rate(): void {
    this.drainPerMs = this.feedback.prefillRate.tokensPerSec / 1000 / (this.blockChars / this.charsPerToken);
  }

  /** Drains the prefill debt by the time since it was last looked at. */
  drain(now: number): void {
    if (this.prefillDebt > 0) this.prefillDebt = Math.max(0, this.prefillDebt - this.drainPerMs * (now - this.debtAt));
    this.debtAt = now;
  }

  savedBreaker(): SavedBreaker {
    const { state, since, opened, silent } = this.breaker.snapshot();
    this.savedRestingUntil = this.restingUntil;
    return { id: this.id, baseUrl: this.baseUrl, state, since, opened, ...(silent ? { silent } : {}), ...(this.restingUntil > 0 ? { restingUntil: this.restingUntil } : {}) };
  }

  snapshot(): BackendSnapshot {
    const o = this.counters.outcomes;
    return {
      id: this.id,
      takesRequests: this.admitted,
      inFlight: this.inFlight,
      prefixBlocks: this.prefixes.size,
      prefixCapacity: this.prefixes.capacity,
      completed: o.ok,
      failed: o["upstream-error"],
      rejected: o.rejected,
      aborted: o["client-abort"] + o["rate-limited"],
      expired: o.expired,
      ttftEwmaMs: this.ttftEwmaMs,
      usage: { prompt: this.counters.tokens.prompt, cached: this.counters.tokens.cached },
      prefillDebtBlocks: Math.round(this.prefillDebt),
      breaker: this.breaker.snapshot(),
      nextProbeAt: this.breaker.state === "closed" ? null : this.nextProbeAt,
      restingUntil: this.restingUntil === 0 ? null : this.restingUntil,
      learned: this.feedback.snapshot(),
    };
  }

  /** `current`: BackendMetrics.current, which its router knows. */
  metrics(current: boolean): BackendMetrics {
    const c = this.counters;
    return {
      id: this.id,
      current,
      inFlight: this.inFlight,
      breaker: this.breaker.state,
      breakerTransitions: { ...this.breaker.entered },
      outcomes: { ...c.outcomes },
      failures: { ...c.failures },
      reasons: { ...c.reasons },
      ttft: c.ttft.snapshot(),
      duration: c.duration.snapshot(),
      tokens: { ...c.tokens },
      prefix: { entries: this.prefixes.size, capacity: this.prefixes.capacity, bytes: this.prefixes.bytes },
      learned: this.feedback.snapshot(),
    };
  }
}
