/**
 * One backend's circuit breaker. Closed: every request may go. Open: none may, after
 * `consecutiveFailures` failures in a row or a failure rate of `failureRate` over the last
 * `windowMs` (once `minRequests` ended in it). After `openMs`, or as soon as an active health
 * probe succeeds, half-open: at most `halfOpenRequests` trial requests at a time; a failed trial
 * opens it again, `closeAfterSuccesses` good trials or probes close it. A failed probe opens it
 * again only once a probe succeeded since it opened: its probe endpoint then answers, and its
 * failing says the backend is down. Until then a failed probe may say only that there is no
 * such endpoint (Ollama has no /health; an ingress may expose only /v1/*), and the trials decide:
 * opening again on it would disown the trials in flight, and a trial longer than the probe
 * interval (a chat stream) could never close the breaker.
 * A breaker opened by silence (a failure that was a timeout with no answer at all: a stream's
 * first token, or a non-streamed answer its router judged silent, src/routing/silence.ts) takes
 * no good probe as evidence until it closes: the server took the request and never answered,
 * and its health endpoint says ok on a hung engine all the same (vLLM's and llama.cpp's do). Only
 * its cool-down half-opens it, and only trials close it; its router does not probe it at all.
 * Pure: the caller passes the time, so tests and the Durable Object drive it alike.
 */
export type BreakerState = "closed" | "open" | "half-open";

export interface BreakerParams {
  consecutiveFailures: number;
  failureRate: number;
  minRequests: number;
  windowMs: number;
  openMs: number;
  halfOpenRequests: number;
  closeAfterSuccesses: number;
}

export interface BreakerSnapshot {
  state: BreakerState;
  /** When it entered that state (epoch ms). */
  since: number;
  consecutiveFailures: number;
  /** How often it opened since the object started. */
  opened: number;
  /** Opened by silence: good health probes are no evidence until trials close it. */
  silent: boolean;
}

/** The failure-rate window, in this many buckets: old outcomes leave it a bucket at a time. */
const BUCKETS = 10;

export class Breaker {
  state: BreakerState = "closed";
  since = 0;
  opened = 0;
  /** The failure that last opened it was silence (see above); cleared when it closes. */
  silent = false;
  /** Transitions since the object started, by the state entered (a restored state is none). */
  readonly entered: Record<BreakerState, number> = { closed: 0, "half-open": 0, open: 0 };
  /** A probe succeeded since it last opened: its probe endpoint answers, so a failed probe is evidence. */
  private probeAnswers = false;
  private consecutive = 0;
  private trials = 0;
  private successes = 0;
  private p: BreakerParams;
  private readonly ok = new Array<number>(BUCKETS).fill(0);
  private readonly failed = new Array<number>(BUCKETS).fill(0);
  private bucketAt = 0;

  constructor(p: BreakerParams) {
    this.p = p;
  }

  /** New settings (a newer config version): the state and the window's counts carry over. */
  configure(p: BreakerParams): void {
    this.p = p;
  }

  /** Whether a request may go now; half-open past its cool-down counts the trial it lets through. */
  admits(now: number): boolean {
    if (this.state === "open") {
      if (now - this.since < this.p.openMs) return false;
      this.enter("half-open", now);
    }
    return this.state === "closed" || this.trials < this.p.halfOpenRequests;
  }

  /** A request admitted by `admits` was sent: in half-open it is one of the trials. */
  sent(): boolean {
    if (this.state !== "half-open") return false;
    this.trials++;
    return true;
  }

  /**
   * How a request ended: true good, false a backend failure. A trial's end is marked `trial`; a
   * failure that was silence (a timeout with no answer), `silent`.
   */
  record(good: boolean, now: number, trial: boolean, silent = false): void {
    if (trial && this.trials > 0) this.trials--;
    if (this.state === "half-open") {
      if (!trial) return;
      if (good) this.succeed(now);
      else this.open(now, silent);
      return;
    }
    if (this.state === "open") return;
    this.roll(now);
    if (good) {
      this.consecutive = 0;
      (this.ok[0] as number)++;
      return;
    }
    this.consecutive++;
    (this.failed[0] as number)++;
    const bad = sum(this.failed);
    const total = bad + sum(this.ok);
    if (this.consecutive >= this.p.consecutiveFailures || (total >= this.p.minRequests && bad / total >= this.p.failureRate)) this.open(now, silent);
  }

  /** A request ended without a verdict on the backend (client gone, lease expired, rate limited). */
  abandon(trial: boolean): void {
    if (trial && this.trials > 0) this.trials--;
  }

  /** An active health probe's answer; only open and half-open backends are probed. */
  probed(good: boolean, now: number): void {
    if (this.state === "closed") return;
    if (!good) {
      // Still down, if its probe endpoint answered since it opened: a half-open backend opens again.
      // Else the trials decide (see above). An open one keeps its cool-down: probes come more often
      // than openMs, and a backend without a health endpoint must still get trials.
      if (this.state === "half-open" && this.probeAnswers) this.open(now, this.silent);
      return;
    }
    // Even a silent breaker's: the endpoint answers, whatever that says of the engine.
    this.probeAnswers = true;
    if (this.silent) return;
    if (this.state === "open") this.enter("half-open", now);
    else this.succeed(now);
  }

  snapshot(): BreakerSnapshot {
    return { state: this.state, since: this.since, consecutiveFailures: this.consecutive, opened: this.opened, silent: this.silent };
  }

  /** Restores a persisted state (after the Durable Object was evicted); one saved before `silent` was kept is not. */
  restore(s: Pick<BreakerSnapshot, "state" | "since" | "opened"> & { silent?: boolean }): void {
    this.to(s.state, s.since);
    // Not saved: trials decide until a probe answers again.
    this.probeAnswers = false;
    this.opened = s.opened;
    this.silent = s.state !== "closed" && s.silent === true;
  }

  private succeed(now: number): void {
    if (++this.successes >= this.p.closeAfterSuccesses) this.enter("closed", now);
  }

  private open(now: number, silent: boolean): void {
    this.opened++;
    this.silent = silent;
    this.probeAnswers = false;
    this.enter("open", now);
  }

  /** A transition: counted. */
  private enter(state: BreakerState, now: number): void {
    this.entered[state]++;
    this.to(state, now);
  }

  private to(state: BreakerState, now: number): void {
    this.state = state;
    this.since = now;
    this.trials = 0;
    this.successes = 0;
    if (state === "closed") {
      this.silent = false;
      this.consecutive = 0;
      this.ok.fill(0);
      this.failed.fill(0);
      this.bucketAt = now;
    }
  }

  /** Shifts the window so bucket 0 holds outcomes of the current windowMs / BUCKETS slice. */
  private roll(now: number): void {
    const width = this.p.windowMs / BUCKETS;
    const steps = Math.floor((now - this.bucketAt) / width);
    if (steps <= 0) return;
    const n = Math.min(steps, BUCKETS);
    for (let k = 0; k < n; k++) {
      this.ok.pop();
      this.ok.unshift(0);
      this.failed.pop();
      this.failed.unshift(0);
    }
    this.bucketAt += steps * width;
  }
}

function sum(a: readonly number[]): number {
  let s = 0;
  for (const x of a) s += x;
  return s;
}
