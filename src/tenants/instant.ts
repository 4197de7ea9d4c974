import { dayOf } from "./period.ts";

const FOUR_DIGIT_YEAR = /^\d{4}-/;
const INSTANT = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/i;

/**
 * An instant as the admin API takes one: an ISO 8601 timestamp with its zone, or a UTC day
 * (YYYY-MM-DD, its midnight); null when it is neither or names no real day (2026-02-30, in a
 * timestamp too).
 */
export function instantOf(text: string): number | null {
  if (!INSTANT.test(text)) return null;
  const ms = Date.parse(text);
  if (!Number.isFinite(ms)) return null;
  // Date.parse rolls an impossible day over into the next month, in a timestamp as in a day
  // (2027-02-30T00:00:00Z is March 2nd): the day the text names must read back the same.
  const day = text.slice(0, 10);
  const midnight = Date.parse(day);
  if (!Number.isFinite(midnight) || dayOf(midnight) !== day) return null;
  // A zone's offset can carry the last day of 9999 (or the first of 0000) out of the four-digit
  // years: the instant would be shown as +010000-…, which this refuses as input.
  if (!FOUR_DIGIT_YEAR.test(new Date(ms).toISOString())) return null;
  return ms;
}

/** A usage query's since/until: an instant's UTC day (usage is kept per day, so a timestamp counts its whole day). */
export function dayParam(text: string): string | null {
  const ms = instantOf(text);
  return ms === null ? null : dayOf(ms);
}
