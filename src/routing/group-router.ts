import type { ResolvedGroup } from "../config/load.ts";
import { HotPrefixes } from "./hot-prefixes.ts";
import { PrefixSet } from "./prefix-set.ts";
import { choose, type BackendView, type HotProbe, type RouteReason, type Rng } from "./strategies.ts";

/** Distinct hot-prefix candidates remembered per group. */
const HOT_PREFIXES_TRACKED = 8192;

export interface RouteDecision {
  backend: number;
  backendId: string;
  lease: string;
  reason: RouteReason;
  matched: number;
  total: number;
}

export type LeaseOutcome = "ok" | "upstream-error" | "client-abort";

export interface LeaseRelease {
  lease: string;
  outcome: LeaseOutcome;
  /** Time to the first upstream byte, when one arrived. */
  ttftMs?: number;
}

interface BackendState extends BackendView {
  id: string;
  /** Prompt blocks it drains per millisecond. */
  drainPerMs: number;
  debtAt: number;
  completed: number;
  failed: number;
  aborted: number;
  expired: number;
  ttftEwmaMs: number | null;
}

interface Lease {
  backend: number;
  expiresAt: number;
  /** Blocks it added to its backend's prefill debt. */
  blocks: number;
}

export interface BackendSnapshot {
  id: string;
  inFlight: number;
  prefixBlocks: number;
  completed: number;
  failed: number;
  aborted: number;
  expired: number;
  ttftEwmaMs: number | null;
  prefillDebtBlocks: number;
}

/** Characters per token the gateway assumes when it turns a prefill rate into hash blocks. */
const CHARS_PER_TOKEN = 4;

/**
 * Routing state of one model group: per-backend in-flight counts and prefix sets, and the
 * leases that hold in-flight slots. Picking a backend and taking its slot happen in one call,
 * so a burst of identical prompts cannot all see the same idle backend.
 */
export class GroupRouter {
  private group: ResolvedGroup;
  private readonly backends: BackendState[];
  // Insertion order is expiry order: every lease of a group lives for the same TTL.
  private readonly leases = new Map<string, Lease>();
  private readonly epoch: string;
  private seq = 0;
  private rrCursor = 0;
  private readonly rng: Rng;
  private readonly hot: HotPrefixes | null;
  private now = 0;
  private readonly hotProbe: HotProbe;

  constructor(group: ResolvedGroup, rng: Rng = Math.random) {
    this.group = group;
    this.rng = rng;
    this.hot = group.hotThreshold > 0 ? new HotPrefixes(HOT_PREFIXES_TRACKED, group.hotHalfLifeMs) : null;
    this.hotProbe = (hash) => (this.hot as HotPrefixes).hit(hash, this.now) >= group.hotThreshold;
    this.epoch = Math.floor(rng() * 0x7fffffff).toString(36);
    this.backends = group.deployments.map((d) => ({
      id: d.id,
      inFlight: 0,
      maxInFlight: d.maxInFlight,
      prefixes: new PrefixSet(d.kvCapacityBlocks),
      prefillDebt: 0,
      debtAt: 0,
      drainPerMs: d.prefillTokensPerSec / 1000 / (group.blockChars / CHARS_PER_TOKEN),
      completed: 0,
      failed: 0,
      aborted: 0,
      expired: 0,
      ttftEwmaMs: null,
    }));
  }

  get leaseCount(): number {
    return this.leases.size;
  }

  /** Earliest lease expiry, for the alarm that reclaims leaked slots. */
  get nextExpiry(): number | null {
    for (const lease of this.leases.values()) return lease.expiresAt;
    return null;
  }

  route(chain: ArrayLike<number>, now: number): RouteDecision | null {
    if (this.leases.size > 0) this.expire(now);
    const g = this.group;
    this.now = now;
    for (const b of this.backends) {
      if (b.prefillDebt > 0) b.prefillDebt = Math.max(0, b.prefillDebt - b.drainPerMs * (now - b.debtAt));
      b.debtAt = now;
    }
    const choice = choose(g.strategy, this.backends, chain, g, this.rng, this.rrCursor, this.hot ? this.hotProbe : null);
    if (!choice) return null;
    if (g.strategy === "round-robin") this.rrCursor = (choice.index + 1) % this.backends.length;
    const b = this.backends[choice.index] as BackendState;
    b.inFlight++;
    // The blocks it must prefill there join that backend's queue of prompt work.
    const blocks = chain.length - choice.matched;
    b.prefillDebt += blocks;
    if (g.strategy === "prefix-aware" && chain.length > 0) b.prefixes.learn(chain);
    const lease = `${this.epoch}.${(++this.seq).toString(36)}`;
    this.leases.set(lease, { backend: choice.index, expiresAt: now + g.leaseTtlMs, blocks });
    return { backend: choice.index, backendId: b.id, lease, reason: choice.reason, matched: choice.matched, total: chain.length };
  }

  /** Idempotent: a lease already released or reclaimed is ignored, so counts never go negative. */
  release(r: LeaseRelease): void {
    const lease = this.leases.get(r.lease);
    if (!lease) return;
    this.leases.delete(r.lease);
    const b = this.backends[lease.backend] as BackendState;
    b.inFlight--;
    // A finished request was prefilled: whatever of its work the drain estimate still holds is done.
    b.prefillDebt = Math.max(0, b.prefillDebt - lease.blocks);
    if (r.outcome === "ok") b.completed++;
    else if (r.outcome === "upstream-error") b.failed++;
    else b.aborted++;
    if (r.ttftMs !== undefined) b.ttftEwmaMs = b.ttftEwmaMs === null ? r.ttftMs : 0.8 * b.ttftEwmaMs + 0.2 * r.ttftMs;
  }

  /** Reclaims leases past their TTL; returns how many. */
  expire(now: number): number {
    let n = 0;
    for (const [id, lease] of this.leases) {
      if (lease.expiresAt > now) break;
      this.leases.delete(id);
      const b = this.backends[lease.backend] as BackendState;
      b.inFlight--;
      b.expired++;
      n++;
    }
    return n;
  }

  snapshot(): BackendSnapshot[] {
    return this.backends.map((b) => ({
      id: b.id,
      inFlight: b.inFlight,
      prefixBlocks: b.prefixes.size,
      completed: b.completed,
      failed: b.failed,
      aborted: b.aborted,
      expired: b.expired,
      ttftEwmaMs: b.ttftEwmaMs,
      prefillDebtBlocks: Math.round(b.prefillDebt),
    }));
  }
}
