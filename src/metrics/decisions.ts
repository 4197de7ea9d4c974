import type { Outcome, RoutedAs } from "./backend-counters.ts";

/** One routing decision as `GET /admin/v1/groups/:group/decisions` lists it. */
export interface DecisionView {
  /** When the object decided (ISO 8601). */
  at: string;
  backend: string;
  reason: RoutedAs;
  /** Leading prompt blocks the backend's prefix set held, of the prompt's total. */
  matched: number;
  total: number;
  /** null while the lease is in flight. */
  outcome: Outcome | null;
  /** null until released, and for a lease whose Worker saw no first byte. */
  ttft_ms: number | null;
}

interface Slot {
  seq: number;
  at: number;
  backend: string;
  reason: RoutedAs;
  matched: number;
  total: number;
  outcome: Outcome | null;
  ttftMs: number | null;
}

/** Decisions a group keeps: what the dashboard shows of the last second or so. */
export const DECISIONS_KEPT = 100;

/**
 * The group's last decisions, in a ring of slots made once and written over: a decision fills the
 * oldest slot, and its lease's end fills in the outcome — when the slot still holds that decision.
 */
export class DecisionRing {
  private readonly slots: Slot[];
  private next = 0;

  constructor(size = DECISIONS_KEPT) {
    this.slots = Array.from({ length: size }, () => ({ seq: -1, at: 0, backend: "", reason: "failover", matched: 0, total: 0, outcome: null, ttftMs: null }));
  }

  /** Records a decision; returns its number, for `ended`. */
  add(at: number, backend: string, reason: RoutedAs, matched: number, total: number): number {
    const seq = this.next++;
    const s = this.slots[seq % this.slots.length] as Slot;
    s.seq = seq;
    s.at = at;
    s.backend = backend;
    s.reason = reason;
    s.matched = matched;
    s.total = total;
    s.outcome = null;
    s.ttftMs = null;
    return seq;
  }

  /** The lease of decision `seq` ended; a decision already written over is let be. */
  ended(seq: number, outcome: Outcome, ttftMs: number | null): void {
    if (seq < 0) return;
    const s = this.slots[seq % this.slots.length] as Slot;
    if (s.seq !== seq) return;
    s.outcome = outcome;
    s.ttftMs = ttftMs;
  }

  /** Newest first. */
  list(): DecisionView[] {
    const out: DecisionView[] = [];
    const n = this.slots.length;
    for (let seq = this.next - 1; seq >= 0 && seq >= this.next - n; seq--) {
      const s = this.slots[seq % n] as Slot;
      out.push({ at: new Date(s.at).toISOString(), backend: s.backend, reason: s.reason, matched: s.matched, total: s.total, outcome: s.outcome, ttft_ms: s.ttftMs });
    }
    return out;
  }
}
