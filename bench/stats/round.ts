/** Rounds a figure for a report: below 10 it keeps two decimals, from 10 on one; null stays null. */
export function round(x: number | null): number | null {
  if (x === null || !Number.isFinite(x)) return null;
  return Math.abs(x) < 10 ? Math.round(x * 100) / 100 : Math.round(x * 10) / 10;
}
