import type { BudgetPeriod } from "./protocol.ts";

/** The UTC day of an instant, YYYY-MM-DD: the unit usage is kept in. */
export function dayOf(now: number): string {
  return new Date(now).toISOString().slice(0, 10);
}

/** The budget period an instant falls in: a UTC day, a UTC month (YYYY-MM), or "total". */
export function periodOf(period: BudgetPeriod, now: number): string {
  if (period === "total") return "total";
  const day = dayOf(now);
  return period === "day" ? day : day.slice(0, 7);
}

/** The first UTC day of the period `periodOf` named, for summing usage rows since it; "" for total. */
export function periodStartDay(period: string): string {
  if (period === "total") return "";
  return period.length === 7 ? `${period}-01` : period;
}
