import { leaseIncarnation, type LeaseRelease, type LeaseRenewal } from "./protocol.ts";

/** A lease an isolate holds, renewed every `everyMs`. */
export interface Holding {
  readonly renewal: LeaseRenewal;
  renewedAt: number;
  readonly everyMs: number;
}

/**
 * What a Worker isolate keeps of its leases with each routing object: the finished ones waiting
 * to ride along with its next call to that object, and the ones it holds, each renewed when it
 * went unrenewed for half its interval, or at once when the object answers as another
 * incarnation than before (answeredBy). The calls and the timers are the caller's
 * (workers/gateway/route-client.ts; bench/virtual/gateway.ts replays it in virtual time).
 */
export class LeaseBook {
  private readonly pending = new Map<string, LeaseRelease[]>();
  private readonly held = new Map<string, Map<string, Holding>>();
  /** Each object's incarnation as its last answer named it (protocol.ts leaseIncarnation). */
  private readonly incarnations = new Map<string, string>();

  /** Finished leases of `object`, taken to ride along with a call to it. */
  takePending(object: string): LeaseRelease[] {
    const list = this.pending.get(object);
    if (!list || list.length === 0) return [];
    this.pending.set(object, []);
    return list;
  }

  /** Finished leases for the next call to `object`, or back after a call failed (a release counts once however often it comes). */
  requeue(object: string, released: LeaseRelease[]): void {
    if (released.length === 0) return;
    const list = this.pending.get(object);
    if (list) list.push(...released);
    else this.pending.set(object, [...released]);
  }

  hold(object: string, renewal: LeaseRenewal, everyMs: number, now: number): Holding {
    const h: Holding = { renewal, renewedAt: now, everyMs };
    this.heldOf(object).set(renewal.lease, h);
    return h;
  }

  drop(object: string, lease: string): void {
    this.heldOf(object).delete(lease);
  }

  /** Held leases of `object` due for renewal: a call going out anyway takes them along. */
  takeRenewals(object: string, now: number): Holding[] {
    const out: Holding[] = [];
    for (const h of this.heldOf(object).values()) {
      if (!isDue(h, now)) continue;
      h.renewedAt = now;
      out.push(h);
    }
    return out;
  }

  /**
   * `object` answered a call with a decision whose lease is `lease`: answeredBy the incarnation its
   * id names (protocol.ts leaseId), read only when the id is not of the one last seen there — on
   * the steady path a compare of its head, nothing allocated.
   */
  answeredWith(object: string, lease: string, carried: readonly Holding[] = []): boolean {
    const known = this.incarnations.get(object);
    if (known !== undefined && lease.charCodeAt(known.length) === 0x2e && lease.startsWith(known)) return false;
    const incarnation = leaseIncarnation(lease);
    return incarnation !== undefined && this.answeredBy(object, incarnation, carried);
  }

  /**
   * `object` answered as `incarnation`. Another than it last answered as is an object that
   * restarted since (evicted, crashed, moved, or updated in a deploy), which knows none of the
   * leases this isolate holds there and counts their backends idle: they are all due at once, to
   * go with the next call to it, and true says to send that call now. `carried`: the renewals the
   * answered call itself carried, which the new object took: not sent again.
   */
  answeredBy(object: string, incarnation: string, carried: readonly Holding[] = []): boolean {
    const before = this.incarnations.get(object);
    if (before === incarnation) return false;
    this.incarnations.set(object, incarnation);
    const held = this.held.get(object);
    // A first answer is the one the leases held there came from.
    if (before === undefined || !held) return false;
    const sent = new Set(carried);
    const due = [...held.values()].filter((h) => !sent.has(h));
    renewLater(due);
    return due.length > 0;
  }

  private heldOf(object: string): Map<string, Holding> {
    let m = this.held.get(object);
    if (!m) this.held.set(object, (m = new Map()));
    return m;
  }
}

/** The first try again after a flush that failed; each next waits twice as long, up to FLUSH_RETRY_MAX_MS. */
export const FLUSH_RETRY_FIRST_MS = 100;
const FLUSH_RETRY_MAX_MS = 5_000;
/**
 * Tries again after a flush failed: 16.3 s of them in all, within the 30 s the runtime lets a
 * finished request's waitUntil run. An object out for longer is not called ever more often, and
 * what waits goes with the isolate's next call to it.
 */
const FLUSH_RETRIES = 8;

/**
 * How long after the flush's `failures`-th failure in a row to try again (the object overloaded,
 * or being reset in a deploy); null: no more. Without a try again, an isolate with no other call
 * for that object kept its releases until their leases expired: its in-flight counts stayed high,
 * and their outcomes and usage were lost.
 */
export function flushRetryMs(failures: number): number | null {
  if (failures < 1 || failures > FLUSH_RETRIES) return null;
  return Math.min(FLUSH_RETRY_MAX_MS, FLUSH_RETRY_FIRST_MS * 2 ** (failures - 1));
}

/** A held lease is renewed this many times per leaseTtlMs: a renewal leaves at the latest one interval after the last, and has the rest of the TTL to land. */
export const RENEWALS_PER_TTL = 3;

/** How often a Worker renews a lease it holds, for a group whose leases last `leaseTtlMs`. */
export function renewEveryMs(leaseTtlMs: number): number {
  return leaseTtlMs / RENEWALS_PER_TTL;
}

/**
 * The shortest leaseTtlMs a group may have (300 ms): its renewal interval is then at least the
 * wait before a renewal whose call failed (the object busy for a moment) is sent again, so that
 * try again leaves within the next interval and has the last one to land. Shorter, it lands after
 * the lease expired: the object frees the slot under the running request and hands it to another,
 * past the backend's maxInFlight, and the late renewal takes it back on top (test/unit/lease-ttl.test.ts).
 */
export const MIN_LEASE_TTL_MS = RENEWALS_PER_TTL * FLUSH_RETRY_FIRST_MS;

/** Unrenewed for half its interval. */
export function isDue(h: Holding, now: number): boolean {
  return now - h.renewedAt >= h.everyMs / 2;
}

/** After a failed call, or to an object that restarted: those renewals are due again. */
export function renewLater(renewing: Iterable<Holding>): void {
  for (const h of renewing) h.renewedAt = -Infinity;
}
