/**
 * The group's bound on a whole request (`totalTimeoutMs`): every attempt, every wait between
 * them, and the body the client receives. What it cuts short is the gateway's decision, never a
 * verdict on a backend.
 */
export class Deadline {
  private readonly at: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Set once the deadline has passed while something was being watched. */
  expired = false;

  readonly totalMs: number | undefined;

  constructor(totalMs: number | undefined) {
    this.totalMs = totalMs;
    this.at = totalMs === undefined ? Infinity : Date.now() + totalMs;
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
