/**
 * The group's bound on a whole request (`totalTimeoutMs`): every attempt, every wait between
 * them, and the body the client receives. What it cuts short is the gateway's decision, never a
 * verdict on a backend.
 */
export class Deadline {
  private at: number;
  /** The request's own group's deadline, which no group it goes on to lengthens (`enter`). */
  private readonly ownAt: number;
  private readonly ownMs: number | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Set once the deadline has passed while something was being watched. */
  expired = false;

  /** The bound the deadline is now counted from (the request's group's, or a tighter one of the group it went on to: `enter`). */
  totalMs: number | undefined;

  constructor(totalMs: number | undefined) {
    this.totalMs = this.ownMs = totalMs;
    this.at = this.ownAt = totalMs === undefined ? Infinity : Date.now() + totalMs;
  }

  /**
   * The request goes on in another group (a fallback), with the `totalTimeoutMs` it has or none:
   * the deadline becomes the earlier of the request's own group's and that bound counted from now.
   * The group serving an attempt bounds it, as when its model is asked directly; counted from the
   * request's start instead, a fallback reached after its own group spent longer than that bound
   * (waiting out a firstByteTimeoutMs) would be cut before its first attempt. A bound ends with its
   * group: a later fallback without one is held to the request's own group's alone.
   */
  enter(totalMs: number | undefined): void {
    // The timer an earlier group's attempt armed, and what it found, were of a bound that may now
    // be gone; the request's own deadline past, the next watch finds it at once.
    clearTimeout(this.timer);
    this.expired = false;
    const at = totalMs === undefined ? Infinity : Date.now() + totalMs;
    [this.at, this.totalMs] = at < this.ownAt ? [at, totalMs] : [this.ownAt, this.ownMs];
  }

  /** Time left, Infinity when the group sets no bound. */
  msLeft(): number {
    return this.at === Infinity ? Infinity : this.at - Date.now();
  }

  /** Aborts `abort` when the deadline passes: the attempt, then the body it became. */
  watch(abort: AbortController): void {
    clearTimeout(this.timer);
    if (this.at === Infinity) return;
    this.timer = setTimeout(() => {
      this.expired = true;
      abort.abort(new Error("request exceeded its total timeout"));
    }, Math.max(0, this.at - Date.now()));
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}
