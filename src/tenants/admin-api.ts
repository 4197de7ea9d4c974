import { keyStatus, type KeyStatus } from "./key-record.ts";
import type { BudgetPeriod, KeyLookup, UsageCursor, UsageFigures, UsageReport } from "./protocol.ts";

/**
 * The admin API's keys and usage as JSON (snake_case, as the API takes them), as the Worker
 * writes them and the CLI reads them. A view never holds the key itself, nor its hash; only the
 * answers to create and rotate add `key`, once.
 */

export interface SpentView {
  /** YYYY-MM-DD, YYYY-MM or "total". */
  period: string;
  tokens: number;
  cost_usd: number;
}

export interface KeyView {
  id: string;
  object: "key";
  prefix: string;
  name: string | null;
  metadata: Record<string, string>;
  models: string[];
  rpm: number | null;
  tpm: number | null;
  max_parallel: number | null;
  budget_tokens: number | null;
  budget_usd: number | null;
  budget_period: BudgetPeriod;
  origins: string[];
  track_usage: boolean;
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
  status: KeyStatus;
  spent: SpentView;
}

/** The answer to create and rotate: the only place the key is ever shown. */
export interface IssuedKeyView extends KeyView {
  key: string;
}

/**
 * A page of keys, oldest first: `GET /admin/v1/keys?limit=N&after=ID`, the next from
 * `after=last_id` while `has_more`. A page is bounded, so the list costs the same with a hundred
 * keys or a million, and never outgrows what one answer of the tenants object may carry.
 */
export interface KeyList {
  object: "list";
  data: KeyView[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

/** Keys a page holds unless `limit` says fewer; at most as many (a key with every field at its largest is ~70 KB). */
export const KEY_PAGE_LIMIT = 100;

export interface UsageFiguresView {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  requests: number;
  cost_usd: number;
}

export interface UsageView extends UsageFiguresView {
  object: "usage";
  key: string;
  /** UTC days, both included: usage is kept per day. */
  since: string;
  until: string;
  model: string | null;
  /** A page of the rows, oldest day first; the figures above are over every row. */
  by: (UsageFiguresView & { day: string; model: string; backend: string })[];
  /** Whether rows follow: ask again with `after=next_after`. */
  has_more: boolean;
  next_after: string | null;
}

/** Usage rows a page holds unless `limit` says otherwise, and at most (a row is at most ~600 bytes). */
export const USAGE_PAGE = { limit: 1000, max: 5000 } as const;

const usd = (micros: number) => micros / 1e6;
const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function keyView({ record: r, spent }: KeyLookup, now: number): KeyView {
  return {
    id: r.id,
    object: "key",
    prefix: r.prefix,
    name: r.name,
    metadata: r.metadata,
    models: r.models,
    rpm: r.rpm,
    tpm: r.tpm,
    max_parallel: r.maxParallel,
    budget_tokens: r.budgetTokens,
    budget_usd: r.budgetUsd,
    budget_period: r.budgetPeriod,
    origins: r.origins,
    track_usage: r.trackUsage,
    created_at: new Date(r.createdAt).toISOString(),
    expires_at: iso(r.expiresAt),
    revoked_at: iso(r.revokedAt),
    status: keyStatus(r, now),
    spent: { period: spent.period, tokens: spent.tokens, cost_usd: usd(spent.costMicros) },
  };
}

export function keyList(views: KeyView[], hasMore: boolean): KeyList {
  return { object: "list", data: views, first_id: views[0]?.id ?? null, last_id: views.at(-1)?.id ?? null, has_more: hasMore };
}

function figures(f: UsageFigures): UsageFiguresView {
  return { prompt_tokens: f.promptTokens, completion_tokens: f.completionTokens, cached_tokens: f.cachedTokens, requests: f.requests, cost_usd: usd(f.costMicros) };
}

export function usageView(r: UsageReport): UsageView {
  const last = r.rows.at(-1);
  return {
    object: "usage",
    key: r.key,
    since: r.since,
    until: r.until,
    model: r.model,
    ...figures(r.totals),
    by: r.rows.map((row) => ({ day: row.day, model: row.model, backend: row.backend, ...figures(row) })),
    has_more: r.hasMore,
    next_after: r.hasMore && last ? usageCursorText(last) : null,
  };
}

/** A usage page's cursor as the API gives it: its last row's day, model and backend, as base64url JSON (names are any text). */
function usageCursorText(c: UsageCursor): string {
  let binary = "";
  for (const b of new TextEncoder().encode(JSON.stringify([c.day, c.model, c.backend]))) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The cursor `usageCursorText` wrote, or null when `text` is none. */
export function usageCursorOf(text: string): UsageCursor | null {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return null;
  try {
    const bytes = Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (ch) => ch.charCodeAt(0));
    const v: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes));
    if (!Array.isArray(v) || v.length !== 3 || !v.every((x) => typeof x === "string")) return null;
    const [day, model, backend] = v as [string, string, string];
    return /^\d{4}-\d{2}-\d{2}$/.test(day) ? { day, model, backend } : null;
  } catch {
    // Not base64, not UTF-8 or not JSON: no cursor the API gave.
    return null;
  }
}
