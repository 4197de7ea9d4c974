import type { Backend } from "./backend.ts";

/** A backend's in-flight slot, held by one request until its Worker releases it or it expires. */
export interface Lease {
  backend: Backend;
  expiresAt: number;
  /** Blocks it added to its backend's prefill debt. */
  blocks: number;
  /**
   * Sent as a trial while the backend's breaker was half-open: the breaker's opening count then,
   * so a trial from an earlier half-open period has no say in a later one; −1 for no trial.
   */
  trialOf: number;
}

/** The live leases of one object, in expiry order. */
export class LeaseTable {
  // Insertion order is expiry order: every lease lives for the object's one TTL.
  private readonly live = new Map<string, Lease>();

  get size(): number {
    return this.live.size;
  }

  add(id: string, lease: Lease): void {
    this.live.set(id, lease);
  }

  /** The lease released: removed if live. */
  end(id: string): Lease | undefined {
    const lease = this.live.get(id);
    if (lease) this.live.delete(id);
    return lease;
  }

  /** Removes and returns the leases expired by `now`. */
  takeExpired(now: number): Lease[] {
    const out: Lease[] = [];
    for (const [id, lease] of this.live) {
      if (lease.expiresAt > now) break;
      this.live.delete(id);
      out.push(lease);
    }
    return out;
  }

  nextExpiry(): number | null {
    for (const lease of this.live.values()) return lease.expiresAt;
    return null;
  }
}
