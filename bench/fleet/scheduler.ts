import type { CostModel } from "./cost-model.ts";

/** One request as the engine sees it; the request's handler implements it. */
export interface Sequence {
  /** KV blocks pinned while it runs: prompt plus output. */
  readonly blocksNeeded: number;
  readonly outputTokens: number;
  /** > 0: tokens come at this fixed interval instead of with the batch's decode steps. */
  readonly tokenIntervalMs: number;
  /** Admitted: looks its prompt up in the prefix cache and returns the tokens left to prefill. */
  admit(): number;
  /** Token `index` (from 0) was generated. Returns false if the sequence stopped taking tokens. */
  token(index: number): boolean;
  /** Every token was generated. */
  finish(): void;
  /** Its place among waiting ones under the priority policy: lower first (vLLM's `priority` field). */
  readonly priority?: number;
}

/**
 * The order waiting sequences are admitted in: arrival (vLLM's default, `fcfs`), or by their
 * priority, lower first and arrival within a priority (vLLM's `--scheduling-policy priority`).
 * Either way a sequence already admitted keeps prefilling first: vLLM v1 schedules its running
 * requests before it admits waiting ones, so a priority orders admission, not the batch.
 */
export const SCHEDULING_POLICIES = ["fcfs", "priority"] as const;
export type SchedulingPolicy = (typeof SCHEDULING_POLICIES)[number];

export function isSchedulingPolicy(x: unknown): x is SchedulingPolicy {
  return (SCHEDULING_POLICIES as readonly unknown[]).includes(x);
}

export interface Ticket {
  /** Drops the sequence (the client went away); it gets no further calls. */
  cancel(): void;
}

export interface SchedulerLimits {
  maxNumSeqs: number;
  kvCapacityBlocks: number;
  /** Tokens one step computes: a decode token per decoding sequence, then prefill chunks (vLLM --max-num-batched-tokens). */
  maxNumBatchedTokens: number;
}

type SlotState = "waiting" | "prefilling" | "decoding" | "paced" | "gone";

interface Slot {
  readonly seq: Sequence;
  state: SlotState;
  emitted: number;
  timer: NodeJS.Timeout | undefined;
  /** Prompt tokens still to prefill, set at admission. */
  prefillLeft: number;
  /** Prompt tokens this step prefills; -1 when the step does not prefill this sequence. */
  chunk: number;
}

/**
 * One GPU's engine loop: a queue of waiting sequences in the policy's order, at most maxNumSeqs
 * running, admission also bounded by the KV blocks the running ones pin, and a step timer that
 * advances every running sequence by one token per step. The loop sleeps when nothing runs.
 */
export class BatchScheduler {
  private readonly cost: CostModel;
  private readonly limits: SchedulerLimits;
  private readonly policy: SchedulingPolicy;
  private readonly waitingQueue: Slot[] = [];
  private waitingHead = 0;
  private waitingCount = 0;
  private readonly runningSet = new Set<Slot>();
  private pinnedBlocks = 0;
  private stepTimer: NodeJS.Timeout | undefined;
  private stepImmediate: NodeJS.Immediate | undefined;
  private stopped = false;
  /** Inside endStep, which starts the next step itself. */
  private stepping = false;

  constructor(cost: CostModel, limits: SchedulerLimits, policy: SchedulingPolicy = "fcfs") {
    this.cost = cost;
    this.limits = limits;
    this.policy = policy;
  }

  get running(): number {
    return this.runningSet.size;
  }

  get waiting(): number {
    return this.waitingCount;
  }

  get blocksInUse(): number {
    return this.pinnedBlocks;
  }

  submit(seq: Sequence): Ticket {
    const slot: Slot = { seq, state: "waiting", emitted: 0, timer: undefined, prefillLeft: 0, chunk: -1 };
    this.enqueue(slot);
    this.waitingCount++;
    this.wake();
    return { cancel: () => this.drop(slot) };
  }

  /** Stops every timer; sequences in flight get no further calls. */
  stop(): void {
    this.stopped = true;
    if (this.stepTimer) clearTimeout(this.stepTimer);
    if (this.stepImmediate) clearImmediate(this.stepImmediate);
    for (const slot of this.runningSet) if (slot.timer) clearTimeout(slot.timer);
    this.runningSet.clear();
  }

  private get stepPending(): boolean {
    return this.stepTimer !== undefined || this.stepImmediate !== undefined || this.stepping;
  }

  /** Starts a step if none is under way, after the current tick so that same-tick arrivals share it. */
  private wake(): void {
    if (this.stepPending || this.stopped) return;
    this.stepImmediate = setImmediate(() => {
      this.stepImmediate = undefined;
      this.beginStep();
    });
  }

  /**
   * Schedules one step as vLLM v1's scheduler does with chunked prefill: every decoding sequence
   * takes one token of the step's budget, then sequences partway through their prompt continue in
   * admission order, then waiting ones are admitted in the policy's order, each prefilling as much
   * of its uncached prompt as the budget has left. A prompt longer than the budget spans several steps, so a burst
   * of arrivals gets its first tokens one after another rather than all at the end of one long step.
   */
  private beginStep(): void {
    let decoding = 0;
    for (const s of this.runningSet) if (s.state === "decoding") decoding++;
    let budget = this.limits.maxNumBatchedTokens - decoding;
    let prefillTokens = 0;
    let prefilling = 0;
    const take = (slot: Slot): void => {
      slot.chunk = Math.min(slot.prefillLeft, Math.max(0, budget));
      budget -= slot.chunk;
      prefillTokens += slot.chunk;
      prefilling++;
    };
    for (const s of this.runningSet) {
      if (budget <= 0) break;
      if (s.state === "prefilling") take(s);
    }
    let slot: Slot | undefined;
    while (budget > 0 && this.runningSet.size < this.limits.maxNumSeqs && (slot = this.peekWaiting())) {
      // A sequence larger than the whole cache still runs, alone, rather than never.
      const fits = this.pinnedBlocks + slot.seq.blocksNeeded <= this.limits.kvCapacityBlocks;
      if (!fits && this.runningSet.size > 0) break;
      this.shiftWaiting();
      slot.state = "prefilling";
      this.runningSet.add(slot);
      this.pinnedBlocks += slot.seq.blocksNeeded;
      slot.prefillLeft = slot.seq.admit();
      take(slot);
    }
    if (prefilling === 0 && decoding === 0) return;

    const ms = this.cost.stepMs(prefillTokens, prefilling, decoding, this.runningSet.size);
    const end = (): void => this.endStep();
    if (ms > 0) this.stepTimer = setTimeout(end, ms);
    else this.stepImmediate = setImmediate(end);
  }

  private endStep(): void {
    this.stepTimer = undefined;
    this.stepImmediate = undefined;
    this.stepping = true;
    try {
      for (const slot of this.runningSet) {
        if (slot.state === "prefilling") {
          if (slot.chunk < 0) continue;
          slot.prefillLeft -= slot.chunk;
          slot.chunk = -1;
          if (slot.prefillLeft > 0) continue;
          // The step that finishes the prompt computes the first output token.
          this.emit(slot);
          if (slot.state === "prefilling") {
            slot.state = slot.seq.tokenIntervalMs > 0 ? "paced" : "decoding";
            if (slot.state === "paced") this.pace(slot);
          }
        } else if (slot.state === "decoding") {
          this.emit(slot);
        }
      }
    } finally {
      // A throwing sequence must not stop the engine for every other one.
      this.stepping = false;
      if (!this.stopped) this.beginStep();
    }
  }

  private pace(slot: Slot): void {
    slot.timer = setTimeout(() => {
      slot.timer = undefined;
      this.emit(slot);
      if (slot.state === "paced") this.pace(slot);
    }, slot.seq.tokenIntervalMs);
  }

  private emit(slot: Slot): void {
    const index = slot.emitted++;
    if (!slot.seq.token(index)) {
      this.release(slot);
      return;
    }
    if (slot.emitted >= slot.seq.outputTokens) {
      this.release(slot);
      slot.seq.finish();
    }
  }

  private release(slot: Slot): void {
    if (slot.state === "gone") return;
    if (slot.state !== "waiting") {
      this.runningSet.delete(slot);
      this.pinnedBlocks -= slot.seq.blocksNeeded;
      // Freed blocks or a freed seat may admit a waiting sequence while nothing decodes.
      this.wake();
    }
    if (slot.timer) clearTimeout(slot.timer);
    slot.state = "gone";
  }

  private drop(slot: Slot): void {
    if (slot.state === "waiting") {
      // Left in the queue array and skipped when reached: removing from the middle costs O(n).
      this.waitingCount--;
      slot.state = "gone";
      return;
    }
    this.release(slot);
  }

  /** Into the waiting queue: at its end, or under the priority policy after every waiting one of the same or a lower priority. */
  private enqueue(slot: Slot): void {
    const q = this.waitingQueue;
    const p = slot.seq.priority ?? 0;
    let i = q.length;
    if (this.policy === "priority") while (i > this.waitingHead && ((q[i - 1] as Slot).seq.priority ?? 0) > p) i--;
    if (i === q.length) q.push(slot);
    else q.splice(i, 0, slot);
  }

  private peekWaiting(): Slot | undefined {
    while (this.waitingHead < this.waitingQueue.length) {
      const slot = this.waitingQueue[this.waitingHead];
      if (slot && slot.state === "waiting") return slot;
      this.waitingHead++;
    }
    this.compactWaiting();
    return undefined;
  }

  private shiftWaiting(): void {
    this.waitingHead++;
    this.waitingCount--;
    if (this.waitingHead > 1024 && this.waitingHead * 2 > this.waitingQueue.length) this.compactWaiting();
  }

  private compactWaiting(): void {
    this.waitingQueue.splice(0, this.waitingHead);
    this.waitingHead = 0;
  }
}
