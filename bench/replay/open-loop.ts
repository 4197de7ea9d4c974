import type { TimedRequest, TimedTrace } from "../traces/timed.ts";
import { startQueueSampler, type QueueSamples } from "./queue-sampler.ts";
import { endpointFor, sendTurn } from "./send-turn.ts";
import type { ReplayOptions, RequestResult } from "./types.ts";

/**
 * Open-loop replay: every request is sent at its arrival time, whether or not earlier ones have
 * been answered, as production traffic arrives — a slow server gets a growing queue instead of a
 * slower client. Two exceptions, both counted: a follow-up turn waits for the answer to the turn
 * it follows (TimedRequest.after), and a request due while `maxInFlight` are in flight is not
 * sent (overflow), so an overloaded server cannot make the client hold unbounded sockets.
 */

export interface OpenLoopOptions extends ReplayOptions {
  /** When each of the trace's requests arrives, in ms from the start (bench/traces/arrivals.ts); non-decreasing. */
  arrivalsMs: readonly number[];
  /** Requests in flight at most. Default 1,024. */
  maxInFlight?: number;
  /** No request is sent later than this many ms after the start; the rest are cut. Default: no limit. */
  maxDurationMs?: number;
  /** Base URLs whose /metrics are sampled for the servers' queues (the fleet's workers, not a gateway). */
  metricsUrls?: readonly string[];
  /** Default 250 ms. */
  metricsIntervalMs?: number;
}

/** sent; overflow: due while maxInFlight were in flight; cut: due after maxDurationMs. */
export type Outcome = "sent" | "overflow" | "cut";

export interface OpenLoopRequest extends RequestResult {
  /** Index in the trace's requests. `session` is the request's id, `turn` its depth in its conversation (0 for a first turn). */
  index: number;
  outcome: Outcome;
  /** ms from the start: the arrival time it was given. */
  scheduledMs: number;
  /** When it could be sent: its arrival, or the end of the turn it follows if that came later. */
  readyMs: number;
  /** When it was sent; null if it was not. */
  sentMs: number | null;
}

export interface OpenLoopResult {
  /** In trace order. */
  requests: OpenLoopRequest[];
  wallMs: number;
  /** null without metricsUrls. */
  serverQueue: QueueSamples | null;
}

const DEFAULT_MAX_IN_FLIGHT = 1024;
const DEFAULT_METRICS_INTERVAL_MS = 250;

/** Resolves when every request has been answered, failed, or not sent; a failure is recorded, never thrown. */
export async function replayOpenLoop(trace: TimedTrace, opts: OpenLoopOptions): Promise<OpenLoopResult> {
  const endpoint = endpointFor(opts);
  const sampler = opts.metricsUrls?.length ? startQueueSampler(opts.metricsUrls, opts.metricsIntervalMs ?? DEFAULT_METRICS_INTERVAL_MS) : null;
  const started = performance.now();
  const send: SendRequest = (request, turn, done) => {
    const messagesJson = request.messages().map((m) => JSON.stringify(m));
    void sendTurn(endpoint, { session: request.id, turn, messagesJson, maxTokens: request.maxTokens, collectText: false }).then(({ result }) => done(result));
  };
  try {
    const requests = await new Promise<OpenLoopRequest[]>((resolve) => scheduleOpenLoop(trace, opts, send, () => performance.now() - started, resolve));
    const wallMs = performance.now() - started;
    return { requests, wallMs, serverQueue: sampler ? await sampler.stop() : null };
  } finally {
    // After a throw too: the sampler's timer must not outlive the run.
    await sampler?.stop();
    endpoint.agent.destroy();
  }
}

/** Sends one request of the trace (`turn`: its depth in its conversation) and calls `done` once with how it went; it never throws. */
export type SendRequest = (request: TimedRequest, turn: number, done: (result: RequestResult) => void) => void;

/**
 * The open-loop schedule itself, over any way of sending: each request goes out through `send`
 * at its arrival time by `now` (ms from the start) and the timers, under the rules above, and
 * `finish` gets every request once all have ended. replayOpenLoop sends over HTTP on the wall
 * clock; bench/virtual/ sends to the simulator's engine in virtual time.
 */
export function scheduleOpenLoop(
  trace: TimedTrace,
  opts: Pick<OpenLoopOptions, "arrivalsMs" | "maxInFlight" | "maxDurationMs">,
  send: SendRequest,
  now: () => number,
  finish: (requests: OpenLoopRequest[]) => void,
): void {
  checkSchedule(trace, opts.arrivalsMs);
  new OpenLoopRun(trace, opts, send, now, finish).run();
}

function checkSchedule(trace: TimedTrace, arrivalsMs: readonly number[]): void {
  if (arrivalsMs.length !== trace.requests.length) {
    throw new RangeError(`${arrivalsMs.length} arrival times for ${trace.requests.length} requests`);
  }
  trace.requests.forEach((r, i) => {
    const at = arrivalsMs[i] ?? NaN;
    if (!(at >= (arrivalsMs[i - 1] ?? 0))) throw new RangeError(`arrival ${i} (${at} ms) comes before the one ahead of it`);
    if (r.after !== null && !(r.after >= 0 && r.after < i)) throw new RangeError(`request ${r.id} follows ${r.after}, which does not come before it`);
  });
}

type State = "waiting" | "held" | "in-flight" | "over";

/** One replay's bookkeeping: which request is where, and who waits on whom. */
class OpenLoopRun {
  private readonly results: (OpenLoopRequest | undefined)[];
  private readonly state: State[];
  private readonly depth: number[];
  /** Follow-ups held until the request at the key has ended. */
  private readonly heldBy = new Map<number, number[]>();
  private readonly maxInFlight: number;
  private readonly maxDurationMs: number;
  private readonly trace: TimedTrace;
  private readonly arrivalsMs: readonly number[];
  private readonly send: SendRequest;
  private readonly now: () => number;
  private finished = false;
  private inFlight = 0;
  private held = 0;
  private next = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly finish: (requests: OpenLoopRequest[]) => void;

  constructor(trace: TimedTrace, opts: Pick<OpenLoopOptions, "arrivalsMs" | "maxInFlight" | "maxDurationMs">, send: SendRequest, now: () => number, finish: (requests: OpenLoopRequest[]) => void) {
    this.trace = trace;
    this.arrivalsMs = opts.arrivalsMs;
    this.send = send;
    this.now = now;
    this.finish = finish;
    const n = trace.requests.length;
    this.results = new Array<OpenLoopRequest | undefined>(n);
    this.state = new Array<State>(n).fill("waiting");
    this.depth = trace.requests.map(() => 0);
    trace.requests.forEach((r, i) => {
      if (r.after !== null) this.depth[i] = (this.depth[r.after] ?? 0) + 1;
    });
    this.maxInFlight = opts.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT;
    this.maxDurationMs = opts.maxDurationMs ?? Infinity;
  }

  run(): void {
    this.tick();
  }

  /** Lets in every request whose time has come, then sleeps until the next one's. */
  private tick(): void {
    this.timer = undefined;
    const n = this.trace.requests.length;
    const now = this.now();
    while (this.next < n && this.scheduled(this.next) <= now) this.arrive(this.next++);
    if (this.next < n && this.scheduled(this.next) > this.maxDurationMs) {
      for (; this.next < n; this.next++) this.notSent(this.next, "cut", this.scheduled(this.next));
    } else if (this.next < n) {
      this.timer = setTimeout(() => this.tick(), this.scheduled(this.next) - now);
    }
    this.settleIfDone();
  }

  private arrive(i: number): void {
    const after = this.trace.requests[i]?.after ?? null;
    const before = after === null ? undefined : this.state[after];
    if (after !== null && (before === "in-flight" || before === "held")) {
      this.state[i] = "held";
      this.held++;
      const list = this.heldBy.get(after);
      if (list) list.push(i);
      else this.heldBy.set(after, [i]);
      return;
    }
    this.ready(i, this.scheduled(i));
  }

  private scheduled(i: number): number {
    return this.arrivalsMs[i] ?? 0;
  }

  private ready(i: number, readyMs: number): void {
    if (readyMs > this.maxDurationMs) return this.notSent(i, "cut", readyMs);
    if (this.inFlight >= this.maxInFlight) return this.notSent(i, "overflow", readyMs);
    this.sendOne(i, readyMs);
  }

  private sendOne(i: number, readyMs: number): void {
    const request = this.trace.requests[i];
    if (!request) return;
    this.state[i] = "in-flight";
    this.inFlight++;
    const sentMs = this.now();
    this.send(request, this.depth[i] ?? 0, (result) => {
      this.inFlight--;
      this.results[i] = { ...result, index: i, outcome: "sent", scheduledMs: this.scheduled(i), readyMs, sentMs };
      this.ended(i);
    });
  }

  private notSent(i: number, outcome: Exclude<Outcome, "sent">, readyMs: number): void {
    const request = this.trace.requests[i];
    this.results[i] = {
      session: request?.id ?? String(i),
      turn: this.depth[i] ?? 0,
      status: 0,
      error: outcome === "overflow" ? `not sent: ${this.maxInFlight} requests in flight` : `not sent: past the run's ${this.maxDurationMs} ms`,
      ttftMs: null,
      totalMs: 0,
      promptTokens: null,
      cachedTokens: null,
      completionTokens: null,
      backend: null,
      reason: null,
      index: i,
      outcome,
      scheduledMs: this.scheduled(i),
      readyMs,
      sentMs: null,
    };
    this.ended(i);
  }

  /** A request is over: the follow-ups it held can go now (if their own time has come, which it has). */
  private ended(i: number): void {
    this.state[i] = "over";
    const followers = this.heldBy.get(i) ?? [];
    this.heldBy.delete(i);
    const now = this.now();
    for (const f of followers) {
      this.held--;
      this.ready(f, Math.max(this.scheduled(f), now));
    }
    this.settleIfDone();
  }

  private settleIfDone(): void {
    if (this.finished || this.next < this.trace.requests.length || this.inFlight > 0 || this.held > 0 || this.timer !== undefined) return;
    // Once: a send that answers at once (the virtual replay's refusals) ends the run inside the tick that sent it.
    this.finished = true;
    this.finish(this.results.filter((r): r is OpenLoopRequest => r !== undefined));
  }
}
