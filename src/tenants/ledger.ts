import type { KeyBudget, LimitName, RouteTenant, TokenUsage } from "../routing/protocol.ts";
import { dayOf, periodOf } from "./period.ts";
import type { BudgetPeriod, Spent, UsageRow } from "./protocol.ts";
import { MinuteWindow } from "./window.ts";

/** A key no request of this group used for this long, with nothing in flight or unsent, is forgotten. */
const IDLE_MS = 120_000;
/**
 * Rows a batch holds at most; more wait for the next. A batch is one RPC (at most 32 MiB, ~600
 * bytes a row with names as long as a config allows) and one transaction of the one tenants
 * object: all that waited after an outage, in a group with many keys over many backends, went as
 * one batch past that limit, failed, and was sent again as it was, failing for good.
 */
const BATCH_MAX_ROWS = 2000;

interface Amount {
  tokens: number;
  costMicros: number;
}

interface KeyState {
  inFlight: number;
  requests: MinuteWindow;
  tokens: MinuteWindow;
  /** The key's spend as the tenants object last answered it. */
  known: Spent | null;
  /** Usage finished here that the tenants object has not acknowledged yet, per UTC day. */
  unacked: Map<string, Amount>;
  seenAt: number;
}

/** A batch of usage rows for the tenants object, under an id it stores once. */
export interface UsageBatch {
  id: string;
  rows: UsageRow[];
  /** The keys whose spend to ask for. */
  keys: string[];
}

/**
 * The usage a routing object has not delivered, as it saves it while the tenants object fails:
 * the batch whose answer did not come (or the next to send) under its id, and the rows waiting
 * behind it, summed per key, day, model and backend. Its size is bounded by those, whatever the
 * length of the outage. Rows waiting are sent only in a batch a copy names first: one cut from
 * them after the copy was saved could arrive, and go again under another id after a restart.
 */
export interface UnsentUsage {
  batch: { id: string; rows: UsageRow[] };
  pending: UsageRow[];
}

/** Where a request's usage was spent, and what it cost. */
export interface UsedAt {
  model: string;
  backend: string;
  costMicros: number;
}

export interface Refusal {
  limit: LimitName;
  retryAfterMs: number | null;
}

/**
 * A routing object's account of the virtual keys that route through it: their requests and
 * tokens over the last minute and their requests in flight (this group's share of each key's
 * limits), the usage that finished here, summed per key, day, model and backend until it is sent
 * to the tenants object in one batch, and each key's spend as the tenants object last told it —
 * which, with what finished here since, is what a budget is checked against.
 */
export class TenantLedger {
  private readonly keys = new Map<string, KeyState>();
  private pending = new Map<string, UsageRow>();
  /** The batch on its way to the tenants object: per key and day, what it adds. */
  private sending: Map<string, Map<string, Amount>> | null = null;
  /** That batch as sent, and one whose answer did not come, to send again as it was. */
  private inFlight: UsageBatch | null = null;
  private retry: UsageBatch | null = null;
  /**
   * How many waiting rows, the first in their order, waited when a send last failed (or were
   * restored): what a copy saved then still owes the tenants object beside its batch. Rows join
   * the order at its end (a key, day, model and backend once sent starts a new row), so these
   * leave first, in the next batches.
   */
  private owed = 0;

  /** Rows waiting for the next batch. */
  get pendingRows(): number {
    return this.pending.size + (this.retry?.rows.length ?? 0);
  }

  get size(): number {
    return this.keys.size;
  }

  /** Why the key may not have another request now, or null. Changes nothing. */
  check(t: RouteTenant, now: number): Refusal | null {
    if (t.admitted) return null;
    if (t.budget && this.overBudget(t.id, t.budget, now)) return { limit: "budget", retryAfterMs: msToNextPeriod(t.budget.period, now) };
    const k = this.keys.get(t.id);
    if (!k) return null;
    if (t.maxParallel !== null && k.inFlight >= t.maxParallel) return { limit: "parallel", retryAfterMs: 1000 };
    if (t.rpm !== null && k.requests.total(now) >= t.rpm) return { limit: "rpm", retryAfterMs: k.requests.msUntilBelow(t.rpm, now) };
    if (t.tpm !== null && this.overTpm(t.id, t.tpm, now)) return { limit: "tpm", retryAfterMs: k.tokens.msUntilBelow(t.tpm, now) };
    return null;
  }

  /** Whether the key's tokens of the last minute here have reached `tpm`. */
  overTpm(key: string, tpm: number, now: number): boolean {
    const k = this.keys.get(key);
    return k !== undefined && k.tokens.total(now) >= tpm;
  }

  /** Whether the key has spent its budget for the period: what it spent as last heard, and what finished here since. */
  overBudget(key: string, budget: KeyBudget, now: number): boolean {
    if (budget.tokens === null && budget.costMicros === null) return false;
    const spent = this.spent(key, budget.period, budget.spent, now);
    return (budget.tokens !== null && spent.tokens >= budget.tokens) || (budget.costMicros !== null && spent.costMicros >= budget.costMicros);
  }

  /** A request of the key took a slot: it counts in the minute's requests (once per request, not per attempt) and in flight. */
  took(t: RouteTenant, now: number): void {
    const k = this.state(t.id, now);
    k.inFlight++;
    if (!t.admitted) k.requests.add(now, 1);
  }

  /** A lease of the key ended; `usage`, when the Worker read it, counts for the key's tokens and is recorded. */
  finished(key: string, usage: TokenUsage | undefined, served: boolean, where: UsedAt, now: number): void {
    const k = this.state(key, now);
    k.inFlight = Math.max(0, k.inFlight - 1);
    this.used(k, key, usage, served, where, now);
  }

  /**
   * A lease of the key this object does not hold ended (it restarted since, or the lease expired
   * first): its usage counts all the same; what is in flight is not its to change.
   */
  finishedUnheld(key: string, usage: TokenUsage, served: boolean, where: UsedAt, now: number): void {
    this.used(this.state(key, now), key, usage, served, where, now);
  }

  /**
   * Part of the usage of a request of the key still in flight (a realtime session, charged as its
   * backend reports it): its tokens count now; the request counts when it finishes.
   */
  charge(key: string, usage: TokenUsage, where: UsedAt, now: number): void {
    this.used(this.state(key, now), key, usage, false, where, now, 0);
  }

  private used(k: KeyState, key: string, usage: TokenUsage | undefined, served: boolean, where: UsedAt, now: number, requests = 1): void {
    if (!usage && !served) return;
    const tokens = usage ? usage.prompt + usage.completion : 0;
    const day = dayOf(now);
    // Usage comes only with the attempt that answered (a failed one before a failover reads none):
    // one whose client left after its usage event is a request its tokens were spent on.
    this.addPending({
      key, day, model: where.model, backend: where.backend,
      promptTokens: usage?.prompt ?? 0, completionTokens: usage?.completion ?? 0, cachedTokens: usage?.cached ?? 0,
      requests, costMicros: usage ? where.costMicros : 0,
    });
    if (!usage) return;
    k.tokens.add(now, tokens);
    addTo(k.unacked, day, tokens, where.costMicros);
  }

  /** A lease of the key expired (its Worker went away): it is in flight no more, and nothing was read. */
  expired(key: string): void {
    const k = this.keys.get(key);
    if (k) k.inFlight = Math.max(0, k.inFlight - 1);
  }

  /**
   * The rows to send under the batch's id (BATCH_MAX_ROWS at most: the rest go in the next), and
   * the keys whose spend to ask for; null when a batch is on its way or nothing waits. A batch
   * whose answer did not come goes again first, as it was: the tenants object may have stored it,
   * and stores an id once.
   */
  takeBatch(): UsageBatch | null {
    if (this.sending) return null;
    let batch = this.retry;
    this.retry = null;
    if (!batch) {
      if (this.pending.size === 0) return null;
      batch = this.batchOfPending();
    }
    this.sending = new Map();
    for (const r of batch.rows) addTo(this.sendingOf(r.key), r.day, r.promptTokens + r.completionTokens, r.costMicros);
    this.inFlight = batch;
    return batch;
  }

  /** The tenants object stored the batch and answered the keys' spend. */
  sent(spent: Record<string, Spent>): void {
    const batch = this.sending;
    this.sending = null;
    this.inFlight = null;
    if (!batch) return;
    for (const [key, days] of batch) {
      const k = this.keys.get(key);
      if (!k) continue;
      for (const [day, a] of days) addTo(k.unacked, day, -a.tokens, -a.costMicros);
      // Tokens are whole numbers, so they say exactly when a day is all acknowledged; its dollars,
      // summed in another order than the batches', may leave a residue of 1e-17, which is no spend
      // and kept the key from ever being forgotten.
      for (const [day, a] of k.unacked) if (a.tokens <= 0) k.unacked.delete(day);
      const s = spent[key];
      if (s) k.known = s;
    }
  }

  /**
   * No answer came for the batch (it may have arrived or not): it is sent again, under its id.
   * The rows waiting are owed from now on (cutOwed).
   */
  unsent(): void {
    if (!this.inFlight) return;
    this.sending = null;
    this.retry = this.inFlight;
    this.inFlight = null;
    this.owed = this.pending.size;
  }

  /**
   * What is not delivered, to save in place of the copy saved before: the batch to send again (or
   * next) under its id, and every waiting row; null when no batch is to go first (after unsent()
   * or cutOwed(), one is).
   */
  unsentToSave(): UnsentUsage | null {
    const batch = this.retry ?? this.inFlight;
    if (!batch) return null;
    return { batch: { id: batch.id, rows: batch.rows }, pending: [...this.pending.values()].map((r) => ({ ...r })) };
  }

  /**
   * A batch arrived while a saved copy is kept: when that copy still owes rows, the next batch is
   * cut from them now, under its id, to be saved before it is sent (a copy naming rows sent under
   * an id it does not know would send them again under another after a restart, counted twice);
   * false when it owes nothing more, and can go. Rows that finished after the last failure are
   * not owed (a copy saved holds them, but does not wait for them): they wait in memory as any.
   */
  cutOwed(): boolean {
    if (this.owed === 0 || this.retry || this.sending) return false;
    this.retry = this.batchOfPending();
    return true;
  }

  /**
   * What an earlier incarnation saved and did not see delivered: its batch goes first, as it was
   * (it may have arrived: the tenants object skips a sender's last id), then its rows, summed with
   * any that finish here. All count in their keys' spend until acknowledged.
   */
  restoreUnsent(saved: UnsentUsage, now: number): void {
    for (const r of saved.pending.concat(saved.batch.rows)) addTo(this.state(r.key, now).unacked, r.day, r.promptTokens + r.completionTokens, r.costMicros);
    this.retry = { id: saved.batch.id, rows: saved.batch.rows, keys: [...new Set(saved.batch.rows.map((r) => r.key))] };
    for (const r of saved.pending) this.addPending(r);
    this.owed = this.pending.size;
  }

  /** Takes up to BATCH_MAX_ROWS waiting rows, the oldest first, out as a batch under a new id. */
  private batchOfPending(): UsageBatch {
    const rows: UsageRow[] = [];
    for (const [id, row] of this.pending) {
      if (rows.length === BATCH_MAX_ROWS) break;
      rows.push(row);
      this.pending.delete(id);
    }
    this.owed = Math.max(0, this.owed - rows.length);
    return { id: crypto.randomUUID(), rows, keys: [...new Set(rows.map((r) => r.key))] };
  }

  /** Sums a row into the one waiting for its key, day, model and backend. */
  private addPending(r: UsageRow): void {
    const id = `${r.key}\n${r.day}\n${r.model}\n${r.backend}`;
    const row = this.pending.get(id);
    if (!row) {
      this.pending.set(id, { ...r });
      return;
    }
    row.promptTokens += r.promptTokens;
    row.completionTokens += r.completionTokens;
    row.cachedTokens += r.cachedTokens;
    row.requests += r.requests;
    row.costMicros += r.costMicros;
  }

  /** Forgets keys idle here with nothing in flight and nothing unsent. */
  sweep(now: number): void {
    for (const [id, k] of this.keys) if (k.inFlight === 0 && k.unacked.size === 0 && now - k.seenAt > IDLE_MS) this.keys.delete(id);
  }

  /** What the key has spent in its current period: the freshest total the tenants object gave (here, or to the Worker), plus what finished here since. */
  private spent(key: string, period: BudgetPeriod, fromWorker: Spent, now: number): Amount {
    const p = periodOf(period, now);
    const k = this.keys.get(key);
    const known = k?.known?.period === p ? k.known : null;
    const given = fromWorker.period === p ? fromWorker : null;
    // Spend only grows within a period: the larger total is the later one. A total read by the
    // Worker after the tenants object stored a batch this object has not heard back about counts
    // that batch twice for a moment: a refusal a little early, never a late one.
    let tokens = Math.max(known?.tokens ?? 0, given?.tokens ?? 0);
    let costMicros = Math.max(known?.costMicros ?? 0, given?.costMicros ?? 0);
    if (k) {
      for (const [day, a] of k.unacked) {
        if (periodOf(period, Date.parse(day)) !== p) continue;
        tokens += a.tokens;
        costMicros += a.costMicros;
      }
    }
    return { tokens, costMicros };
  }

  private state(key: string, now: number): KeyState {
    let k = this.keys.get(key);
    if (!k) this.keys.set(key, (k = { inFlight: 0, requests: new MinuteWindow(), tokens: new MinuteWindow(), known: null, unacked: new Map(), seenAt: now }));
    k.seenAt = now;
    return k;
  }

  private sendingOf(key: string): Map<string, Amount> {
    const s = this.sending as Map<string, Map<string, Amount>>;
    let m = s.get(key);
    if (!m) s.set(key, (m = new Map()));
    return m;
  }
}

function addTo(m: Map<string, Amount>, day: string, tokens: number, costMicros: number): void {
  const a = m.get(day);
  if (a) {
    a.tokens += tokens;
    a.costMicros += costMicros;
  } else m.set(day, { tokens, costMicros });
}

/** Milliseconds until the next budget period starts (UTC); null for a total budget, which never renews. */
export function msToNextPeriod(period: BudgetPeriod, now: number): number | null {
  if (period === "total") return null;
  const d = new Date(now);
  const next = period === "day" ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return next - now;
}
