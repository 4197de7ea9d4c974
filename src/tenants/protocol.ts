import type { AdminResult } from "../fleet/protocol.ts";
import type { KeyStatus } from "./key-record.ts";

/**
 * What the gateway and the tenants' Durable Object (durable-objects/tenants.ts, one object named
 * "tenants") say to each other. Virtual keys live there, stored as SHA-256 hashes; usage arrives
 * there in batches from the routing objects, which count it from the leases' releases.
 */

export type BudgetPeriod = "day" | "month" | "total";

/** What a key may do. null: no limit. */
export interface KeyLimits {
  /** Model or group names (or aliases) the key may call; empty: every model. */
  models: string[];
  /** Requests per minute, counted by each routing object (per model group). */
  rpm: number | null;
  /** Prompt + completion tokens per minute, counted by each routing object. */
  tpm: number | null;
  /** Requests in flight at once, counted by each routing object. */
  maxParallel: number | null;
  /** Prompt + completion tokens per budget period, over every model. */
  budgetTokens: number | null;
  /** US dollars per budget period, from the groups' prices, over every model. */
  budgetUsd: number | null;
  budgetPeriod: BudgetPeriod;
  /** Browser origins allowed to use the key (exact `scheme://host[:port]`); empty: no browser restriction. */
  origins: string[];
  /** Record this key's usage even when no token limit or budget needs it. */
  trackUsage: boolean;
}

/** A key as stored and shown: never the key itself, only its id and a short visible prefix. */
export interface KeyRecord extends KeyLimits {
  id: string;
  /** The key's first characters, e.g. "sk-kvg-Ab3xQ": how a person tells keys apart. */
  prefix: string;
  name: string | null;
  /** Free-form labels: team, user. */
  metadata: Record<string, string>;
  createdAt: number;
  /** Epoch ms after which the key is refused; null: never. */
  expiresAt: number | null;
  revokedAt: number | null;
}

/** Spend of one key in its current budget period (src/tenants/period.ts names periods). */
export interface Spent {
  period: string;
  /** Prompt + completion tokens. */
  tokens: number;
  /** Millionths of a US dollar. */
  costMicros: number;
}

/** What the Worker caches per key hash. */
export interface KeyLookup {
  record: KeyRecord;
  spent: Spent;
}

/** Usage of one key on one model group's backend on one UTC day, as a routing object sums it. */
export interface UsageRow {
  /** The key's id (KeyRecord.id, which a rotation keeps), never its hash. */
  key: string;
  /** YYYY-MM-DD, UTC. */
  day: string;
  /** The model group's name. */
  model: string;
  backend: string;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  requests: number;
  costMicros: number;
}

/** The tenants object, as the gateway's Worker and the routing objects call it. */
/** A routing object's batch: the object's name, and the batch's id (one batch at a time, sent again until answered). */
export interface BatchId {
  from: string;
  id: string;
}

export interface TenantsRpc {
  /** The key whose SHA-256 (lowercase hex) is `hash`, revoked and expired ones included; null: none. */
  lookup(hash: string): KeyLookup | null;
  /**
   * Adds a batch of usage (one SQLite transaction), and answers the spend of every key in `rows`
   * and in `keys`, in each key's current budget period. A batch its routing object sent again
   * (`batch`: the answer was lost, and it may have been stored) adds nothing.
   */
  record(rows: UsageRow[], keys: string[], batch?: BatchId): Record<string, Spent>;
  /** Every browser origin some key is for, live, revoked or expired: what a CORS preflight (which carries no key) is answered for. */
  origins(): string[];
}

/** A refused admin call, as the fleet registry's are: an OpenAI-style error's status, code, message and field. */
export type TenantsRefusal = Extract<AdminResult, { ok: false }>;
export type TenantsResult<T> = { ok: true; value: T } | TenantsRefusal;

/** A key just made (create) or given a new secret (rotate): the only answer that holds the key itself. */
export interface IssuedKey {
  key: string;
  lookup: KeyLookup;
}

/** Where a page of usage rows ends: its last row's day, model and backend (the rows' order). */
export interface UsageCursor {
  day: string;
  model: string;
  backend: string;
}

/** What a usage query asks: one key's rows between two UTC days (both included), of one model or all, a page of them. */
export interface UsageQuery {
  key: string;
  /** YYYY-MM-DD; null: the oldest day kept. */
  since: string | null;
  /** YYYY-MM-DD; null: today. */
  until: string | null;
  model: string | null;
  /** Rows the page holds at most. */
  limit: number;
  /** The page after this row; null: the first. */
  after: UsageCursor | null;
}

export interface UsageFigures {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  requests: number;
  costMicros: number;
}

export interface UsageReport {
  key: string;
  since: string;
  until: string;
  model: string | null;
  /** Over every row the query names, not only the page's. */
  totals: UsageFigures;
  /** Per day, model and backend, oldest day first: a page of them. */
  rows: (UsageFigures & { day: string; model: string; backend: string })[];
  /** Whether rows follow the page's last. */
  hasMore: boolean;
}

/** A page of the key list: at most `limit` keys, oldest first, after the key `after` (an id) or from the first; of one status, or any. */
export interface KeyPage {
  limit: number;
  after: string | null;
  status: KeyStatus | null;
}

export interface KeyListPage {
  keys: KeyLookup[];
  /** Whether keys follow the page's last. */
  hasMore: boolean;
}

/**
 * The tenants object, as the admin API calls it. Create and update take the admin API's JSON body
 * as it came (src/tenants/key-input.ts checks it); every refusal is a value, never a throw.
 */
export interface TenantsAdminRpc {
  create(input: unknown): Promise<TenantsResult<IssuedKey>>;
  /** A page of the keys, oldest first. */
  list(page: KeyPage): TenantsResult<KeyListPage>;
  get(id: string): TenantsResult<KeyLookup>;
  /** Changes the fields the patch names; null clears a limit. */
  update(id: string, patch: unknown): TenantsResult<KeyLookup>;
  /** Marks the key revoked (its hash stays, so the gateway learns it is revoked); again: no change. */
  revoke(id: string): TenantsResult<KeyLookup>;
  /** A new key for the same id: same limits, usage goes on; the old key's hash is gone at once. */
  rotate(id: string): Promise<TenantsResult<IssuedKey>>;
  usage(query: UsageQuery): TenantsResult<UsageReport>;
}
