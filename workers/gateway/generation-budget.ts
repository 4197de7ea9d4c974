/**
 * A non-streamed request's bound on its generations (`nonStreamTimeoutMs`), counted from its first
 * attempt's start: an attempt after a failure gets what is left of it, not a limit of its own. The
 * limit sits a margin under the clients' own timeouts (the SDKs' 10 min, which send a timed-out
 * call again twice) so that the gateway's 504, which they are told not to retry, comes first; a
 * fresh limit for each attempt took a request whose backend crashed minutes into its generation
 * past that timeout, and the client sent the generation again beside the gateway's retry. Unset
 * until an attempt fails: a request its first attempt serves pays nothing for it.
 */
export class GenerationBudget {
  /** When the request's generations must have ended (epoch ms); undefined before a non-streamed attempt failed. */
  private at: number | undefined;
  /** The group the client asked for's limit, counted from the first failed attempt's start: what no fallback lengthens. */
  private ownAt: number | undefined;
  private readonly ownLimitMs: number;

  /** `ownLimitMs`: the `nonStreamTimeoutMs` of the group the client asked for. */
  constructor(ownLimitMs: number) {
    this.ownLimitMs = ownLimitMs;
  }

  /** When the next attempt's generation must end; undefined for a first attempt, which has its group's whole limit. */
  get endsAt(): number | undefined {
    return this.at;
  }

  /**
   * A non-streamed attempt failed whose limit, `limitMs` (its group's), would have passed at
   * `endsAt`: the first sets the budget, the later ones ran within it.
   */
  failed(endsAt: number, limitMs: number): void {
    if (this.at !== undefined) return;
    this.at = endsAt;
    this.ownAt = endsAt - limitMs + this.ownLimitMs;
  }

  /**
   * The request goes on in another group (a fallback), whose own `nonStreamTimeoutMs` may be
   * tighter: the budget becomes the earlier of the asked-for group's and that limit counted from
   * now, as Deadline.enter does for `totalTimeoutMs`. The group serving an attempt bounds it; its
   * bound ends with it, and no fallback lengthens the one set under the client's timeout by the
   * group it asked for.
   */
  enter(limitMs: number): void {
    if (this.ownAt !== undefined) this.at = Math.min(this.ownAt, Date.now() + limitMs);
  }

  /** Time left for the attempts after a failure; Infinity until the budget is set. */
  msLeft(): number {
    return this.at === undefined ? Infinity : this.at - Date.now();
  }
}
