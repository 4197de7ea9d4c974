import { dayOf } from "./period.ts";

const INSTANT = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/i;

/**
 * An instant as the admin API takes one: an ISO 8601 timestamp with its zone, or a UTC day
 * (YYYY-MM-DD, its midnight); null when it is neither or names no real day (2026-02-30).
 */
export function instantOf(text: string): number | null {
  if (!INSTANT.test(text)) return null;
  const ms = Date.parse(text);
  if (!Number.isFinite(ms)) return null;
  // Date.parse rolls some impossible days over into the next month; a real day reads back the same.
  if (text.length === 10 && dayOf(ms) !== text) return null;
  return ms;
}

/** A usage query's since/until: an instant's UTC day (usage is kept per day, so a timestamp counts its whole day). */
export function dayParam(text: string): string | null {
  const ms = instantOf(text);
  return ms === null ? null : dayOf(ms);
}
