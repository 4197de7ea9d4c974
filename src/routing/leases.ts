import type { Backend } from "./backend.ts";
import { forgetOldest } from "./forget-oldest.ts";
import type { Lesson } from "./prefix-set.ts";
import type { TokenUsage } from "./protocol.ts";

/** A backend's in-flight slot, held by one request until its Worker releases it or it expires. */
export interface Lease {
  backend: Backend;
  expiresAt: number;
  /** When it was routed (epoch ms); NaN for a lease taken back from a renewal, whose start is unknown. */
  routedAt: number;
  /** Blocks it added to its backend's prefill debt. */
  blocks: number;
  /**
   * Its backend's `queued` count just after its blocks joined the queue: where its prompt work
   * ends. 0 for a lease taken back from a renewal: it came before anything this object queued.
   */
  queuedTo: number;
  /**
   * Sent as a trial while the backend's breaker was half-open: the breaker's opening count then,
   * so a trial from an earlier half-open period has no say in a later one; −1 for no trial.
   */
  trialOf: number;
  /** What routing it taught its backend's prefix set, taken back if the backend did not serve it; null when nothing was kept. */
  lesson: Lesson | null;
  /** The virtual key it counts for, or null (the master key). */
  key: string | null;
  /**
   * Its usage is its key's (RouteTenant.recordsUsage, or LeaseRenewal.recordsUsage for a lease
   * taken back): false, its end charges the key nothing, whatever usage it carries.
   */
  recordsUsage: boolean;
  /** Its decision's number in the group's DecisionRing; −1 for a lease taken back from a renewal. */
  decision: number;
  /** The prompt tokens its decision's matched blocks stand for: what routing predicts the backend has cached. */
  predictedCached: number;
  /** Its entry in the backend's pending prefills (PendingPrefills.add), cleared when it ends; −1 for none. */
  pending: number;
  /** Leading blocks of the chain its backend's prefix set matched; −1 when part of that was still being prefilled, the prompt held media (RouteCall.media), or there was no chain (no capacity evidence). */
  matched: number;
  /** The chain's blocks; −1 when the fingerprint stopped at maxPrefixBlocks, the prompt held media (RouteCall.media), or for a lease taken back from a renewal. */
  total: number;
  /** Where the match stood in its prefix set's eviction order (PrefixSet.matchRecency); NaN when unknown. */
  recency: number;
  /** Blocks of prompt work its backend was estimated to have queued ahead of it when it was routed. */
  ahead: number;
  /**
   * Taken back by a renewal that came after this object had reclaimed it (counted `expired`): its
   * slot is held again for the rest of its answer, and its end is not counted again among its
   * backend's outcomes (its breaker and its key still learn of it).
   */
  reclaimed?: true;
  /** What its renewals charged its key so far (LeaseRenewal.usage): its release charges the rest. */
  charged?: TokenUsage;
  /**
   * false for a completions batch: its usage is its prompts' together (vLLM and SGLang sum them),
   * its chain and match its first prompt's alone, so no figure it reports measures the chain:
   * read as one, characters per token fell to its floor, 8× off for every request to the backend.
   * So for a Responses follow-up, whose usage counts the stored conversation its chain never read,
   * and any prompt the Worker calls partial (RouteCall.partial).
   */
  teaches?: false;
}

/**
 * Release ids remembered, so a renewal that crossed its lease's release on the way (both in
 * flight from one isolate) is not taken for a lease to adopt. Such calls are milliseconds apart;
 * this many releases (at least seven eighths of it: the oldest eighth is forgotten at once) cover
 * seconds at the object's highest rate.
 */
const ENDED_REMEMBERED = 4096;

/** The live leases of one object, in expiry order, and the ids of those released recently. */
export class LeaseTable {
  // Insertion order is expiry order: every lease lives for the object's one TTL from its last renewal.
  private readonly live = new Map<string, Lease>();
  private readonly ended = new Set<string>();
  /** Ids of leases reclaimed at their expiry lately: a renewal after that is late, not from before a restart. */
  private readonly expired = new Set<string>();
  /** Blocks the live leases' lessons hold: bounded by the router. */
  lessonBlocks = 0;

  get size(): number {
    return this.live.size;
  }

  add(id: string, lease: Lease): void {
    this.live.set(id, lease);
    if (lease.lesson) this.lessonBlocks += lease.lesson.blocks;
  }

  /** The lease released: removed if live, its id remembered either way. */
  end(id: string): Lease | undefined {
    if (this.ended.size >= ENDED_REMEMBERED) forgetOldest(this.ended, ENDED_REMEMBERED >> 3);
    this.ended.add(id);
    const lease = this.live.get(id);
    if (lease) this.remove(id, lease);
    return lease;
  }

  endedRecently(id: string): boolean {
    return this.ended.has(id);
  }

  expiredRecently(id: string): boolean {
    return this.expired.has(id);
  }

  /** Moves a live lease's expiry; undefined when the lease is not live here. */
  extend(id: string, expiresAt: number): Lease | undefined {
    const lease = this.live.get(id);
    if (!lease) return undefined;
    this.live.delete(id);
    lease.expiresAt = expiresAt;
    this.live.set(id, lease);
    return lease;
  }

  /** Removes and returns the leases expired by `now`. */
  takeExpired(now: number): Lease[] {
    const out: Lease[] = [];
    for (const [id, lease] of this.live) {
      if (lease.expiresAt > now) break;
      this.remove(id, lease);
      if (this.expired.size >= ENDED_REMEMBERED) forgetOldest(this.expired, ENDED_REMEMBERED >> 3);
      this.expired.add(id);
      out.push(lease);
    }
    return out;
  }

  /**
   * No live lease expires after `at` (the object's TTL got shorter): those that would are brought
   * forward to it, which keeps insertion order the expiry order for the leases taken after.
   */
  capExpiry(at: number): void {
    for (const [id, lease] of this.live) {
      if (lease.expiresAt <= at) continue;
      // Re-inserted with the cap: it goes after those that expire before it, as they all do.
      this.live.delete(id);
      lease.expiresAt = at;
      this.live.set(id, lease);
    }
  }

  nextExpiry(): number | null {
    for (const lease of this.live.values()) return lease.expiresAt;
    return null;
  }

  private remove(id: string, lease: Lease): void {
    this.live.delete(id);
    if (lease.lesson) this.lessonBlocks -= lease.lesson.blocks;
  }
}
