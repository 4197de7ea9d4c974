/**
 * The group's bound on a whole request (`totalTimeoutMs`): every attempt, every wait between
 * them, and the body the client receives. What it cuts short is the gateway's decision, never a
 * verdict on a backend.
 */
export class Deadline {
  private at: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Set once the deadline has passed while something was being watched. */
  expired = false;

  /** The bound the deadline is now counted from (the request's group's, or a tighter one it went on to: `enter`). */
  totalMs: number | undefined;

  constructor(totalMs: number | undefined) {
    this.totalMs = totalMs;
    this.at = totalMs === undefined ? Infinity : Date.now() + totalMs;
  }

  /**
   * The request goes on in another group (a fallback) with a `totalTimeoutMs` of its own: the
   * deadline becomes the earlier of the one it had and that bound counted from now. The group
   * serving an attempt bounds it, as when its model is asked directly; counted from the request's
   * start instead, a fallback reached after its own group spent longer than that bound (waiting
   * out a firstByteTimeoutMs) would be cut before its first attempt. The earlier of the two keeps
   * the bound of the group the client asked for, which no fallback lengthens.
   */
  enter(totalMs: number | undefined): void {
    if (totalMs === undefined || Date.now() + totalMs >= this.at) return;
    this.at = Date.now() + totalMs;
    this.totalMs = totalMs;
  }

  /** Time left, Infinity when the group sets no bound. */
  msLeft(): number {
    return this.at === Infinity ? Infinity : this.at - Date.now();
  }

  /** Aborts `abort` when the deadline passes: the attempt, then the body it became. */
  watch(abort: AbortController): void {
    if (this.at === Infinity) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.expired = true;
      abort.abort(new Error("request exceeded its total timeout"));
    }, Math.max(0, this.at - Date.now()));
  }

  clear(): void {
    clearTimeout(this.timer);
  }
}
