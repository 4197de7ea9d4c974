import type { UsageFigures, UsageRow } from "./protocol.ts";

/** Windows kept at once: the listings being read now, not a history of every query. */
const WINDOWS = 32;

/** What a usage listing asks the totals of: one key's rows between two UTC days (both included), of one model or all. */
export interface UsageWindow {
  key: string;
  since: string;
  until: string;
  model: string | null;
}

/** A window's totals, and how many rows they are over (none: the key may not exist). */
export interface WindowTotals {
  figures: UsageFigures;
  rows: number;
}

interface Kept extends UsageWindow {
  totals: WindowTotals;
}

/**
 * The totals of the usage windows read lately, kept up to date as usage arrives, so a listing's
 * later pages answer the same totals as a fresh sum without reading every row of the window again
 * (a 60-page listing of a key with 60,000 rows read 3.6 million rows for its totals). Exact only
 * while every change to the usage rows reaches it: `added` for each row stored, `clear` when rows
 * are deleted. `added` cannot tell a new row from one summed into a row kept: a window's row count
 * then only grows, which is all it is read for (whether any row is there).
 */
export class UsageTotals {
  private readonly kept = new Map<string, Kept>();

  get(w: UsageWindow): WindowTotals | undefined {
    const id = windowId(w);
    const k = this.kept.get(id);
    if (!k) return undefined;
    // The most recently read go last; the first is the one to drop.
    this.kept.delete(id);
    this.kept.set(id, k);
    return { figures: { ...k.totals.figures }, rows: k.totals.rows };
  }

  set(w: UsageWindow, totals: WindowTotals): void {
    const id = windowId(w);
    this.kept.delete(id);
    if (this.kept.size >= WINDOWS) this.kept.delete(this.kept.keys().next().value as string);
    this.kept.set(id, { key: w.key, since: w.since, until: w.until, model: w.model, totals: { figures: { ...totals.figures }, rows: totals.rows } });
  }

  /** A row of usage was stored (added to the row of its key, day, model and backend). */
  added(r: UsageRow): void {
    for (const k of this.kept.values()) {
      if (k.key !== r.key || r.day < k.since || r.day > k.until || (k.model !== null && k.model !== r.model)) continue;
      const f = k.totals.figures;
      f.promptTokens += r.promptTokens;
      f.completionTokens += r.completionTokens;
      f.cachedTokens += r.cachedTokens;
      f.requests += r.requests;
      f.costMicros += r.costMicros;
      k.totals.rows++;
    }
  }

  /** Rows were deleted: every window is summed afresh when next read. */
  clear(): void {
    this.kept.clear();
  }
}

function windowId(w: UsageWindow): string {
  return JSON.stringify([w.key, w.since, w.until, w.model]);
}
