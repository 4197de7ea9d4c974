import type { LimitName, TokenUsage } from "../routing/protocol.ts";

/** One virtual key's counters in one group, as `GET /metrics` reads them: by the key's id, never the key. */
export interface KeyMetrics {
  id: string;
  requests: number;
  tokens: TokenUsage;
  /**
   * Requests whose tokens were estimated: the upstream never reported them (src/tenants/estimate.ts).
   * Absent from an object of a release before it (a deploy's Workers and objects change apart).
   */
  estimated?: number;
  /** Requests refused for a limit, by limit; only the limits hit. */
  limitHits: Partial<Record<LimitName, number>>;
}

/**
 * Keys counted per group. A gateway has as many keys as its tenants made, and each that routes here
 * costs a few numbers; past this many the longest-counted key not counted since it was last passed
 * over is dropped (its series starts again at 0 if it comes back, which Prometheus reads as a
 * counter reset). The longest-counted alone was the key in steady use: among one-shot keys, a
 * production key's counts fell to 0 every 10,000 new keys.
 */
const MAX_KEYS = 10_000;

/** Totals since the object started, per virtual key: unlike the ledger's minute windows, they only grow. */
export class KeyCounters {
  private readonly keys = new Map<string, KeyMetrics>();
  /** Keys with a request since they were added or the eviction last passed them: it moves them to the back instead (a second chance; no reordering a count). */
  private readonly countedSince = new Set<string>();

  /** A request of the key took a slot (once a request: a retry's lease is not counted again). */
  request(id: string): void {
    this.of(id, true).requests++;
  }

  used(id: string, usage: TokenUsage, estimated = false): void {
    const k = this.of(id);
    if (estimated) k.estimated = (k.estimated ?? 0) + 1;
    const t = k.tokens;
    t.prompt += usage.prompt;
    t.completion += usage.completion;
    t.cached += usage.cached;
  }

  limited(id: string, limit: LimitName): void {
    const hits = this.of(id, true).limitHits;
    hits[limit] = (hits[limit] ?? 0) + 1;
  }

  snapshot(): KeyMetrics[] {
    return [...this.keys.values()];
  }

  /** `again`: a request of the key, not the end of one (whose usage every one-shot key has too). */
  private of(id: string, again = false): KeyMetrics {
    let k = this.keys.get(id);
    if (k) {
      if (again) this.countedSince.add(id);
      return k;
    }
    if (this.keys.size >= MAX_KEYS) this.dropOne();
    this.keys.set(id, (k = { id, requests: 0, tokens: { prompt: 0, completion: 0, cached: 0 }, estimated: 0, limitHits: {} }));
    return k;
  }

  /** Drops the longest-counted key not counted since it was last passed over; those that were go to the back. */
  private dropOne(): void {
    for (const [oldest, k] of this.keys) {
      this.keys.delete(oldest);
      if (!this.countedSince.delete(oldest)) return;
      this.keys.set(oldest, k);
    }
  }
}
