/**
 * An upstream attempt's one timer: the limit on its wait for the upstream (first byte, or a whole
 * non-streamed answer), and its lease's renewal for as long as it runs. One timer, not one each:
 * a timer costs a request ~10 µs of the runtime's to set and clear, and nearly every request ends
 * long before its lease is due for renewal (leaseTtlMs / 3, 10 s by default).
 */
export class AttemptTimer {
  private handle: ReturnType<typeof setTimeout> | undefined;
  private limitAt: number;
  /** Whether the armed timer is the limit's (else a renewal's). */
  private armedForLimit = false;
  private stopped = false;

  /** When the limit began to count (epoch ms). */
  readonly startedAt: number;
  private readonly renewEveryMs: number;
  private readonly onLimit: () => void;
  private readonly renew: () => void;

  constructor(limitMs: number, renewEveryMs: number, onLimit: () => void, renew: () => void) {
    this.renewEveryMs = renewEveryMs;
    this.onLimit = onLimit;
    this.renew = renew;
    const now = Date.now();
    this.startedAt = now;
    this.limitAt = now + limitMs;
    this.arm(now);
  }

  /** The limit no longer applies (a stream's first byte came): only the renewals go on. */
  lift(): void {
    if (this.stopped) return;
    this.limitAt = Infinity;
    if (!this.armedForLimit) return;
    clearTimeout(this.handle);
    this.arm(Date.now());
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.handle);
  }

  private arm(now: number): void {
    const toLimit = this.limitAt - now;
    this.armedForLimit = toLimit <= this.renewEveryMs;
    this.handle = this.armedForLimit
      ? setTimeout(() => {
          this.stopped = true;
          this.onLimit();
        }, Math.max(0, toLimit))
      : setTimeout(() => {
          this.renew();
          this.arm(Date.now());
        }, this.renewEveryMs);
  }
}
