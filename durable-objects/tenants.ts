import { DurableObject } from "cloudflare:workers";
import { keyHash, newKey, prefixOf } from "../src/tenants/key-format.ts";
import { parseKeyInput } from "../src/tenants/key-input.ts";
import { newKeyId, newRecord, patchedRecord, type KeyStatus } from "../src/tenants/key-record.ts";
import { dayOf, periodOf } from "../src/tenants/period.ts";
import type { BatchId, IssuedKey, KeyListPage, KeyLookup, KeyPage, KeyRecord, Spent, TenantsAdminRpc, TenantsRefusal, TenantsResult, TenantsRpc, UsageFigures, UsageQuery, UsageReport, UsageRow } from "../src/tenants/protocol.ts";
import { UsageTotals } from "../src/tenants/usage-totals.ts";
import { migrateTenants } from "./tenants-schema.ts";

const DAY_MS = 86_400_000;
/**
 * Usage rows are kept this many days, then pruned once a day by the alarm, so storage stays
 * bounded: keys × models × backends × 400 rows at most (the alarm is set by a batch of usage,
 * for the next midnight, so an idle gateway's object is not woken). A "total" budget still counts
 * a pruned row: a key's spend is kept apart, as running totals.
 */
export const USAGE_KEPT_DAYS = 400;
/** The alarm prunes a few minutes after each UTC midnight. */
const PRUNE_AFTER_MIDNIGHT_MS = 5 * 60_000;
/**
 * A prune drops at most this many usage rows a transaction, then sets the alarm again
 * PRUNE_AGAIN_MS on while keys remain to look at: lookups and batches are served between,
 * and no backlog (a prune that failed for days, a rollback's) runs into the 30 s an alarm may take.
 */
export const PRUNE_CHUNK_ROWS = 10_000;
/**
 * And looks at this many keys at most: on most days next to nothing is old, and a pass over every
 * key (two statements each) of a million short-lived keys would hold the object for seconds, past
 * the 30 s an alarm may take, rolled back and failing the same way each day after.
 */
export const PRUNE_CHUNK_KEYS = 10_000;
const PRUNE_AGAIN_MS = 1_000;

interface KeyRow {
  record: string;
  [column: string]: SqlStorageValue;
}

interface Amount {
  tokens: number;
  costMicros: number;
}

interface UsageDbRow {
  day: string;
  model: string;
  backend: string;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  requests: number;
  cost_micros: number;
  [column: string]: SqlStorageValue;
}

/** `param`: where the id was given — a /keys/{id} route's path, or usage's ?key=. */
const notFound = (id: string, param: "id" | "key" = "id"): TenantsRefusal => ({ ok: false, status: 404, code: "key_not_found", message: `no key "${id}"`, param });
const badDay = (param: "since" | "until"): TenantsRefusal => ({ ok: false, status: 400, code: "invalid_value", message: `${param} must be a day, YYYY-MM-DD`, param });
const DAY = /^\d{4}-\d{2}-\d{2}$/;
/** The keys of a status at `now`, as keyStatus tells it (a revocation outranks an expiry): a condition and its bindings. */
const STATUS_WHERE: Record<KeyStatus, (now: number) => [string, ...number[]]> = {
  active: (now) => ["revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)", now],
  revoked: () => ["revoked_at IS NOT NULL"],
  expired: (now) => ["revoked_at IS NULL AND expires_at <= ?", now],
};

/**
 * The tenants: one object for the gateway (src/tenants/tenants-name.ts), holding the virtual keys
 * and their usage in SQLite. A key is stored as its SHA-256 only; the key itself leaves this object
 * once, in the answer to create or rotate. The gateway's Workers look keys up by hash (and cache
 * them); the routing objects send usage in batches, one transaction each, never a write per
 * request.
 */
export class Tenants extends DurableObject<unknown> implements TenantsRpc, TenantsAdminRpc {
  private readonly sql: SqlStorage;
  private pruneScheduled = false;
  /** The key the last prune chunk went on after ("" for the first): the next begins after it. */
  private pruneAfterKey = "";
  /**
   * The keys' origins as last read, kept up to date as keys are made and changed: no status
   * counts, so time changes nothing, and only a change that takes an origin off a key clears it
   * (another key may still name it). Every isolate asks every 10 s, for preflights anyone may send:
   * reading every key was ~100 ms of this object's time with 50,000 keys, and cleared at each key
   * made, a gateway minting a key a second read them all again every second.
   */
  private keyOrigins: Set<string> | null = null;
  /** The totals of the usage windows read lately, so a listing's later pages do not sum every row of the window again. */
  private readonly usageTotals = new UsageTotals();

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    migrateTenants(ctx.storage, Date.now());
  }

  lookup(hash: string): KeyLookup | null {
    const row = this.sql.exec<KeyRow>("SELECT record FROM keys WHERE hash = ?", hash).toArray()[0];
    return row ? this.withSpent(row, Date.now()) : null;
  }

  /** Rows of keys it does not know are stored all the same (usage is history); such keys have no spend in the answer. */
  record(rows: UsageRow[], keys: string[], batch?: BatchId): Record<string, Spent> {
    const now = Date.now();
    const stored = this.ctx.storage.transactionSync(() => {
      if (batch) {
        const [last] = this.sql.exec<{ last_batch: string }>("SELECT last_batch FROM senders WHERE name = ?", batch.from).toArray();
        if (last?.last_batch === batch.id) return false;
        this.sql.exec("INSERT INTO senders (name, last_batch, at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET last_batch = excluded.last_batch, at = excluded.at", batch.from, batch.id, now);
      }
      // The usage rows, then their spend, in this order: a spend write after the last usage write
      // tells the next start that nothing is missing from `spend` (tenants-schema.ts, step 3).
      const spend = new Map<string, Amount>();
      for (const r of rows) {
        addSpend(spend, r);
        this.sql.exec(
          `INSERT INTO usage (key, day, model, backend, prompt_tokens, completion_tokens, cached_tokens, requests, cost_micros)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (key, day, model, backend) DO UPDATE SET
             prompt_tokens = prompt_tokens + excluded.prompt_tokens, completion_tokens = completion_tokens + excluded.completion_tokens,
             cached_tokens = cached_tokens + excluded.cached_tokens, requests = requests + excluded.requests,
             cost_micros = cost_micros + excluded.cost_micros`,
          r.key, r.day, r.model, r.backend, r.promptTokens, r.completionTokens, r.cachedTokens, r.requests, r.costMicros,
        );
      }
      for (const [at, a] of spend) {
        const [key, period] = at.split("\n") as [string, string];
        this.sql.exec(
          `INSERT INTO spend (key, period, tokens, cost_micros) VALUES (?, ?, ?, ?)
           ON CONFLICT (key, period) DO UPDATE SET tokens = tokens + excluded.tokens, cost_micros = cost_micros + excluded.cost_micros`,
          key, period, a.tokens, a.costMicros,
        );
      }
      return true;
    });
    // Once stored for good: a batch sent again, or a transaction that failed, adds nothing.
    if (stored) for (const r of rows) this.usageTotals.added(r);
    this.schedulePrune(now);
    const spent: Record<string, Spent> = {};
    for (const id of new Set([...rows.map((r) => r.key), ...keys])) {
      const row = this.rowOf(id);
      if (row) spent[id] = this.withSpent(row, now).spent;
    }
    return spent;
  }

  /**
   * Of every key, revoked and expired ones too (keys are never deleted): a preflight carries no
   * key, and the page of a key the gateway no longer takes is to read that key's 401, which its
   * browser sends only once the preflight is granted. The request that follows is its key's to decide.
   */
  origins(): string[] {
    if (!this.keyOrigins) {
      const out = new Set<string>();
      for (const { record } of this.sql.exec<{ record: string }>("SELECT record FROM keys").toArray()) {
        for (const o of (JSON.parse(record) as KeyRecord).origins) out.add(o);
      }
      this.keyOrigins = out;
    }
    return [...this.keyOrigins];
  }

  async create(input: unknown): Promise<TenantsResult<IssuedKey>> {
    const now = Date.now();
    const parsed = parseKeyInput(input, now, false);
    if (!parsed.ok) return parsed;
    const key = newKey();
    const hash = await keyHash(key);
    const record = newRecord(parsed.fields, newKeyId(), prefixOf(key), now);
    this.sql.exec("INSERT INTO keys (id, hash, record, created_at, revoked_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)", record.id, hash, JSON.stringify(record), now, record.revokedAt, record.expiresAt);
    this.originsChanged([], record.origins);
    return { ok: true, value: { key, lookup: this.lookupOf(record.id, now) } };
  }

  list(page: KeyPage): TenantsResult<KeyListPage> {
    const now = Date.now();
    // Each status reads one of the list's indexes (tenants-schema.ts); an expiry is checked as keyStatus does.
    // A Worker of the release before sends no status at all (undefined): every key, as then.
    const [status, ...bound] = page.status == null ? ["1"] : STATUS_WHERE[page.status](now);
    const columns = `SELECT record FROM keys WHERE ${status}`;
    // One more than the page, to tell whether any follow.
    let rows: KeyRow[];
    if (page.after === null) rows = this.sql.exec<KeyRow>(`${columns} ORDER BY created_at, id LIMIT ?`, ...bound, page.limit + 1).toArray();
    else {
      const [from] = this.sql.exec<{ created_at: number }>("SELECT created_at FROM keys WHERE id = ?", page.after).toArray();
      if (!from) return { ok: false, status: 400, code: "invalid_value", message: `after names no key ("${page.after}"): pass the last id of the page before`, param: "after" };
      rows = this.sql.exec<KeyRow>(`${columns} AND (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ?`, ...bound, from.created_at, page.after, page.limit + 1).toArray();
    }
    return { ok: true, value: { keys: rows.slice(0, page.limit).map((row) => this.withSpent(row, now)), hasMore: rows.length > page.limit } };
  }

  get(id: string): TenantsResult<KeyLookup> {
    const row = this.rowOf(id);
    return row ? { ok: true, value: this.withSpent(row, Date.now()) } : notFound(id);
  }

  update(id: string, patch: unknown): TenantsResult<KeyLookup> {
    const now = Date.now();
    const row = this.rowOf(id);
    if (!row) return notFound(id);
    const parsed = parseKeyInput(patch, now, true);
    if (!parsed.ok) return parsed;
    const before = parse(row);
    this.write(patchedRecord(before, parsed.fields), before);
    return { ok: true, value: this.lookupOf(id, now) };
  }

  revoke(id: string): TenantsResult<KeyLookup> {
    const now = Date.now();
    const row = this.rowOf(id);
    if (!row) return notFound(id);
    const record = parse(row);
    if (record.revokedAt === null) this.write({ ...record, revokedAt: now }, record);
    return { ok: true, value: this.lookupOf(id, now) };
  }

  async rotate(id: string): Promise<TenantsResult<IssuedKey>> {
    const key = newKey();
    const hash = await keyHash(key);
    // Read after the digest: a change that came in while it was computed is kept.
    const now = Date.now();
    const row = this.rowOf(id);
    if (!row) return notFound(id);
    const record = parse(row);
    if (record.revokedAt !== null) return { ok: false, status: 409, code: "key_revoked", message: `key "${id}" is revoked; create a new key instead`, param: "id" };
    this.sql.exec("UPDATE keys SET hash = ? WHERE id = ?", hash, id);
    this.write({ ...record, prefix: prefixOf(key) }, record);
    return { ok: true, value: { key, lookup: this.lookupOf(id, now) } };
  }

  usage(query: UsageQuery): TenantsResult<UsageReport> {
    const now = Date.now();
    const until = query.until ?? dayOf(now);
    if (query.since != null && !DAY.test(query.since)) return badDay("since");
    if (!DAY.test(until)) return badDay("until");
    // Left out, `since` is the oldest day kept, or `until` when that is older still: its days are
    // pruned, an empty page, not a refusal naming a `since` the caller never sent.
    const oldestKept = dayOf(now - USAGE_KEPT_DAYS * DAY_MS);
    const since = query.since ?? (until < oldestKept ? until : oldestKept);
    if (since > until) return { ok: false, status: 400, code: "invalid_value", message: `since (${since}) is after until (${until})`, param: "since" };
    const range = "FROM usage WHERE key = ? AND day >= ? AND day <= ? AND (? IS NULL OR model = ?)";
    const figures = (r: UsageDbRow): UsageFigures => ({ promptTokens: r.prompt_tokens, completionTokens: r.completion_tokens, cachedTokens: r.cached_tokens, requests: r.requests, costMicros: r.cost_micros });
    // The totals of every row of the window, on every page: summed once, then kept up to date.
    const window = { key: query.key, since, until, model: query.model };
    let totals = this.usageTotals.get(window);
    if (!totals) {
      const sum = this.sql
        .exec<UsageDbRow & { n: number }>(
          `SELECT COUNT(*) AS n, COALESCE(SUM(prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(completion_tokens), 0) AS completion_tokens,
             COALESCE(SUM(cached_tokens), 0) AS cached_tokens, COALESCE(SUM(requests), 0) AS requests, COALESCE(SUM(cost_micros), 0) AS cost_micros ${range}`,
          query.key, since, until, query.model, query.model,
        )
        .one();
      totals = { figures: figures(sum), rows: sum.n };
      this.usageTotals.set(window, totals);
    }
    // A key with usage is history even when it no longer exists; one with neither is a typo.
    if (totals.rows === 0 && !this.rowOf(query.key) && this.sql.exec("SELECT 1 FROM usage WHERE key = ? LIMIT 1", query.key).toArray().length === 0) return notFound(query.key, "key");
    const columns = "SELECT day, model, backend, prompt_tokens, completion_tokens, cached_tokens, requests, cost_micros";
    // One more than the page, to tell whether any follow. After a cursor, the range starts at its
    // day, so a page reads from where the last one ended rather than from `since` again.
    const a = query.after;
    const rows = (
      a === null
        ? this.sql.exec<UsageDbRow>(`${columns} ${range} ORDER BY day, model, backend LIMIT ?`, query.key, since, until, query.model, query.model, query.limit + 1)
        : this.sql.exec<UsageDbRow>(
            `${columns} ${range} AND (day, model, backend) > (?, ?, ?) ORDER BY day, model, backend LIMIT ?`,
            query.key, a.day > since ? a.day : since, until, query.model, query.model, a.day, a.model, a.backend, query.limit + 1,
          )
    ).toArray();
    const out = rows.slice(0, query.limit).map((r) => ({ day: r.day, model: r.model, backend: r.backend, ...figures(r) }));
    return { ok: true, value: { key: query.key, since, until, model: query.model, totals: totals.figures, rows: out, hasMore: rows.length > query.limit } };
  }

  /**
   * Prunes usage rows past USAGE_KEPT_DAYS a chunk at a time (found key by key: pruneKeys), and
   * once every key was looked at, the spend of periods past (no budget asks for them again) and
   * the senders gone quiet.
   */
  override alarm(): void {
    const now = Date.now();
    const today = dayOf(now);
    const oldestKept = dayOf(now - USAGE_KEPT_DAYS * DAY_MS);
    let stoppedAfter: string | null = null;
    try {
      stoppedAfter = this.ctx.storage.transactionSync(() => {
        const after = this.pruneKeys(oldestKept, this.pruneAfterKey);
        if (after !== null) return after;
        // A month (YYYY-MM) sorts before its days: this month's row and days are kept, and today's.
        this.sql.exec("DELETE FROM spend WHERE period <> 'total' AND (period < ? OR (length(period) = 10 AND period < ?))", today.slice(0, 7), today);
        // A routing object keeps a batch whose answer it lost across its restarts (a rollback, an
        // outage of days): its last id is kept as long as usage is, a row per routing object.
        this.sql.exec("DELETE FROM senders WHERE at < ?", now - USAGE_KEPT_DAYS * DAY_MS);
        return null;
      });
      // Taken only once the chunk is stored: one rolled back is pruned again from where it began.
      this.pruneAfterKey = stoppedAfter ?? "";
      this.usageTotals.clear();
      if (stoppedAfter !== null) void this.ctx.storage.setAlarm(now + PRUNE_AGAIN_MS);
    } finally {
      // Set while the next chunk's alarm is, so a batch does not move it to the next midnight.
      // Otherwise the next batch sets the next prune: a gateway with no traffic wakes nothing. A
      // prune that failed too: the runtime retries an alarm that throws a few times, then drops
      // it, and this object (called by every isolate every 10 s) lives on to the next deploy, so a
      // flag left set would have kept usage from being pruned until then.
      this.pruneScheduled = stoppedAfter !== null;
    }
  }

  /**
   * Drops the usage rows of days before `oldestKept`, key by key after the key `after`, until
   * PRUNE_CHUNK_ROWS are gone or PRUNE_CHUNK_KEYS were looked at: the key to go on after when it
   * stopped with keys left to look at, null when done. The day is the primary key's second column, so a `day < ?` alone read every row
   * kept (tens of millions held every key lookup for seconds); key by key, each costs a seek for
   * the key and one for its first day kept, where an index of the day would add ~70 bytes to each
   * usage row stored (~150).
   */
  private pruneKeys(oldestKept: string, after: string): string | null {
    let left = PRUNE_CHUNK_ROWS;
    for (let keys = 0; keys < PRUNE_CHUNK_KEYS; keys++) {
      const [next] = this.sql.exec<{ key: string }>("SELECT key FROM usage WHERE key > ? ORDER BY key LIMIT 1", after).toArray();
      if (!next) return null;
      left -= this.sql.exec(
        "DELETE FROM usage WHERE (key, day, model, backend) IN (SELECT key, day, model, backend FROM usage WHERE key = ? AND day < ? LIMIT ?)",
        next.key, oldestKept, left,
      ).rowsWritten;
      // Its rows may not all be gone: the next chunk begins at it again.
      if (left <= 0) return after;
      after = next.key;
    }
    return after;
  }

  /** Sets the daily prune, once per object's life in memory (usage only ever arrives through `record`). */
  private schedulePrune(now: number): void {
    if (this.pruneScheduled) return;
    this.pruneScheduled = true;
    void this.ctx.storage.setAlarm(Math.floor(now / DAY_MS + 1) * DAY_MS + PRUNE_AFTER_MIDNIGHT_MS);
  }

  private rowOf(id: string): KeyRow | undefined {
    return this.sql.exec<KeyRow>("SELECT record FROM keys WHERE id = ?", id).toArray()[0];
  }

  private lookupOf(id: string, now: number): KeyLookup {
    return this.withSpent(this.rowOf(id) as KeyRow, now);
  }

  /** Stores the key's record (`before`: as it was), and the columns the list finds a status by (a trigger sets them for a release that does not: tenants-schema.ts, step 3). */
  private write(record: KeyRecord, before: KeyRecord): void {
    this.sql.exec("UPDATE keys SET record = ?, revoked_at = ?, expires_at = ? WHERE id = ?", JSON.stringify(record), record.revokedAt, record.expiresAt, record.id);
    this.originsChanged(before.origins, record.origins);
  }

  /** A key that named `before` names `after`: the origins kept gain its new ones; one it no longer names is read again from every key. */
  private originsChanged(before: readonly string[], after: readonly string[]): void {
    if (!this.keyOrigins) return;
    if (before.some((o) => !after.includes(o))) this.keyOrigins = null;
    else for (const o of after) this.keyOrigins.add(o);
  }

  /** The key's spend in its current budget period: one row of its running totals, whatever its history. */
  private withSpent(row: KeyRow, now: number): KeyLookup {
    const record = parse(row);
    const period = periodOf(record.budgetPeriod, now);
    const [sum] = this.sql.exec<{ tokens: number; cost_micros: number }>("SELECT tokens, cost_micros FROM spend WHERE key = ? AND period = ?", record.id, period).toArray();
    return { record, spent: { period, tokens: sum?.tokens ?? 0, costMicros: sum?.cost_micros ?? 0 } };
  }
}

/** Adds a usage row to its key's running totals of every period it falls in: its day, its month, and all time. */
function addSpend(spend: Map<string, Amount>, r: UsageRow): void {
  for (const period of [r.day, r.day.slice(0, 7), "total"]) {
    const at = `${r.key}\n${period}`;
    const a = spend.get(at);
    const tokens = r.promptTokens + r.completionTokens;
    if (a) {
      a.tokens += tokens;
      a.costMicros += r.costMicros;
    } else spend.set(at, { tokens, costMicros: r.costMicros });
  }
}

function parse(row: KeyRow): KeyRecord {
  return JSON.parse(row.record) as KeyRecord;
}
