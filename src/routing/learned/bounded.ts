/**
 * A figure configured by the operator and learned from the engine: the learned value, once there
 * is one, within 1/range× to range× of the configured one — so a run of bad reports can make it
 * wrong, but never absurd, and a new configured value keeps what was learned inside its bounds.
 */
export class LearnedFigure {
  private configured: number;
  private learned: number | null = null;
  private readonly range: number;
  private readonly round: boolean;

  constructor(configured: number, range: number, round = false) {
    this.configured = configured;
    this.range = range;
    this.round = round;
  }

  /** The learned value, else the configured one. */
  get value(): number {
    return this.learned ?? this.configured;
  }

  /** As the operator configured it. */
  get configuredValue(): number {
    return this.configured;
  }

  /** Null while nothing was learned. */
  get learnedValue(): number | null {
    return this.learned;
  }

  configure(configured: number): void {
    this.configured = configured;
    if (this.learned !== null) this.learned = this.bounded(this.learned);
  }

  /** Takes `x`, bounded; true when the value changed. */
  set(x: number): boolean {
    const next = this.bounded(x);
    const changed = next !== this.value;
    this.learned = next;
    return changed;
  }

  /** A saved value; 0 or less: nothing was learned. */
  restore(x: number): void {
    if (x > 0) this.learned = this.bounded(x);
  }

  private bounded(x: number): number {
    const v = Math.min(this.configured * this.range, Math.max(this.configured / this.range, x));
    return this.round ? Math.max(1, Math.round(v)) : v;
  }
}
