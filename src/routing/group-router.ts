import type { ResolvedGroup } from "../config/load.ts";
import { Breaker, type BreakerSnapshot, type BreakerState } from "./breaker.ts";
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
  /** When the object decided (its clock): breakers are judged against the same clock. */
  routedAt: number;
}

/** Why a route call found no backend: all breaker-open or already tried, or all at their cap. */
export interface RouteRefusal {
  refused: "no-backend" | "at-capacity";
}

/**
 * How an attempt on a backend ended. ok and upstream-error count for the backend's breaker;
 * rejected (the request's own fault: a 4xx, or a failure that followed the request to another
 * backend), rate-limited and client-abort (the client left, or the gateway's own deadline) do not.
 */
export type LeaseOutcome = "ok" | "upstream-error" | "rejected" | "client-abort" | "rate-limited";

export interface LeaseRelease {
  lease: string;
  outcome: LeaseOutcome;
  /** Time to the first upstream byte, when one arrived. */
  ttftMs?: number;
}

interface BackendState extends BackendView {
  id: string;
  baseUrl: string;
  /** Prompt blocks it drains per millisecond. */
  drainPerMs: number;
  debtAt: number;
  breaker: Breaker;
  nextProbeAt: number;
  completed: number;
  failed: number;
  rejected: number;
  aborted: number;
  expired: number;
  ttftEwmaMs: number | null;
}

interface Lease {
  backend: number;
  expiresAt: number;
  /** Blocks it added to its backend's prefill debt. */
  blocks: number;
  /**
   * Sent as a trial while the backend's breaker was half-open: the breaker's opening count then,
   * so a trial from an earlier half-open period has no say in a later one; −1 for no trial.
   */
  trialOf: number;
}

export interface BackendSnapshot {
  id: string;
  inFlight: number;
  prefixBlocks: number;
  completed: number;
  failed: number;
  /** Requests it refused as the request's own fault (4xx), or that failed the same way elsewhere. */
  rejected: number;
  aborted: number;
  expired: number;
  ttftEwmaMs: number | null;
  prefillDebtBlocks: number;
  breaker: BreakerSnapshot;
}

export interface SavedBreaker {
  id: string;
  baseUrl: string;
  state: BreakerState;
  since: number;
  opened: number;
}

/** An active health probe the Durable Object should send. */
export interface ProbeTarget {
  backend: number;
  url: string;
}

/** Whether the lease is a trial of its backend's current half-open period (an earlier period's has no say). */
function isTrial(lease: Lease, b: BackendState): boolean {
  return lease.trialOf >= 0 && lease.trialOf === b.breaker.opened;
}

/** Characters per token the gateway assumes when it turns a prefill rate into hash blocks. */
const CHARS_PER_TOKEN = 4;

/**
 * Routing state of one model group: per-backend in-flight counts and prefix sets, and the
 * leases that hold in-flight slots. Picking a backend and taking its slot happen in one call,
 * so a burst of identical prompts cannot all see the same idle backend.
 */
export class GroupRouter {
  readonly group: ResolvedGroup;
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
      baseUrl: d.baseUrl,
      inFlight: 0,
      maxInFlight: d.maxInFlight,
      prefixes: new PrefixSet(d.kvCapacityBlocks),
      prefillDebt: 0,
      debtAt: 0,
      available: true,
      breaker: new Breaker(group.breaker),
      nextProbeAt: 0,
      drainPerMs: d.prefillTokensPerSec / 1000 / (group.blockChars / CHARS_PER_TOKEN),
      completed: 0,
      failed: 0,
      rejected: 0,
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

  /**
   * Picks a backend and takes its slot. `exclude`: backends this request already failed on.
   * A backend whose breaker is open is never picked; a half-open one takes a few trials.
   */
  route(chain: ArrayLike<number>, now: number, exclude: readonly number[] = []): RouteDecision | RouteRefusal {
    if (this.leases.size > 0) this.expire(now);
    const g = this.group;
    this.now = now;
    let admissible = 0;
    for (let i = 0; i < this.backends.length; i++) {
      const b = this.backends[i] as BackendState;
      if (b.prefillDebt > 0) b.prefillDebt = Math.max(0, b.prefillDebt - b.drainPerMs * (now - b.debtAt));
      b.debtAt = now;
      b.available = !exclude.includes(i) && b.breaker.admits(now);
      if (b.available) admissible++;
    }
    if (admissible === 0) return { refused: "no-backend" };
    const choice = choose(g.strategy, this.backends, chain, g, this.rng, this.rrCursor, this.hot ? this.hotProbe : null);
    if (!choice) return { refused: "at-capacity" };
    if (g.strategy === "round-robin") this.rrCursor = (choice.index + 1) % this.backends.length;
    const b = this.backends[choice.index] as BackendState;
    b.inFlight++;
    // The blocks it must prefill there join that backend's queue of prompt work.
    const blocks = chain.length - choice.matched;
    b.prefillDebt += blocks;
    if (g.strategy === "prefix-aware" && chain.length > 0) b.prefixes.learn(chain);
    const lease = `${this.epoch}.${(++this.seq).toString(36)}`;
    this.leases.set(lease, { backend: choice.index, expiresAt: now + g.leaseTtlMs, blocks, trialOf: b.breaker.sent() ? b.breaker.opened : -1 });
    return { backend: choice.index, backendId: b.id, lease, reason: choice.reason, matched: choice.matched, total: chain.length, routedAt: now };
  }

  /** Idempotent: a lease already released or reclaimed is ignored, so counts never go negative. */
  release(r: LeaseRelease, now: number): void {
    const lease = this.leases.get(r.lease);
    if (!lease) return;
    this.leases.delete(r.lease);
    const b = this.backends[lease.backend] as BackendState;
    b.inFlight--;
    // A finished request was prefilled: whatever of its work the drain estimate still holds is done.
    b.prefillDebt = Math.max(0, b.prefillDebt - lease.blocks);
    if (r.outcome === "ok") b.completed++;
    else if (r.outcome === "upstream-error") b.failed++;
    else if (r.outcome === "rejected") b.rejected++;
    else b.aborted++;
    const before = b.breaker.state;
    const trial = isTrial(lease, b);
    if (r.outcome === "ok" || r.outcome === "upstream-error") b.breaker.record(r.outcome === "ok", now, trial);
    else b.breaker.abandon(trial);
    if (b.breaker.state !== before) this.breakerChanged(b, now);
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
      b.breaker.abandon(isTrial(lease, b));
      n++;
    }
    return n;
  }

  /** Open and half-open backends whose next health probe is due; each is then not due for a jittered interval. */
  dueProbes(now: number): ProbeTarget[] {
    const out: ProbeTarget[] = [];
    const { probeIntervalMs, probePath } = this.group.breaker;
    for (let i = 0; i < this.backends.length; i++) {
      const b = this.backends[i] as BackendState;
      if (b.breaker.state === "closed" || b.nextProbeAt > now) continue;
      b.nextProbeAt = now + probeIntervalMs * (0.5 + this.rng());
      out.push({ backend: i, url: b.baseUrl + probePath });
    }
    return out;
  }

  probed(backend: number, good: boolean, now: number): void {
    const b = this.backends[backend];
    if (!b) return;
    const before = b.breaker.state;
    b.breaker.probed(good, now);
    if (b.breaker.state !== before) this.breakerChanged(b, now);
  }

  /** When the object next has work of its own: a lease to reclaim or a probe to send. */
  nextWake(): number | null {
    let at = this.nextExpiry;
    for (const b of this.backends) {
      if (b.breaker.state === "closed") continue;
      if (at === null || b.nextProbeAt < at) at = b.nextProbeAt;
    }
    return at;
  }

  /** Bumped on every breaker transition, so the owner knows when to persist. */
  breakerVersion = 0;

  /** Each backend's most recent prefix blocks, for a snapshot that survives eviction. */
  exportAffinity(maxPerBackend: number): { id: string; blocks: Float64Array }[] {
    return this.backends.map((b) => ({ id: b.id, blocks: b.prefixes.exportRecent(maxPerBackend) }));
  }

  restoreAffinity(saved: readonly { id: string; blocks: Float64Array }[]): void {
    for (const s of saved) this.backends.find((b) => b.id === s.id)?.prefixes.importRecent(s.blocks);
  }

  /** The backend registry with each breaker, as persisted: a restore matches id and URL. */
  breakerStates(): SavedBreaker[] {
    return this.backends.map((b) => ({ id: b.id, baseUrl: b.baseUrl, ...b.breaker.snapshot() }));
  }

  /** Restores breakers of backends still configured at the same URL; a new server starts closed. */
  restoreBreakers(saved: readonly SavedBreaker[]): number {
    let n = 0;
    this.backends.forEach((b) => {
      const s = saved.find((x) => x.id === b.id && x.baseUrl === b.baseUrl);
      if (!s) return;
      b.breaker.restore(s);
      if (s.state !== "closed") n++;
    });
    return n;
  }

  private breakerChanged(b: BackendState, now: number): void {
    this.breakerVersion++;
    // A backend just opened is probed soon: a short outage should not wait out openMs.
    if (b.breaker.state === "open") b.nextProbeAt = now + this.group.breaker.probeIntervalMs * (0.5 + this.rng());
  }

  snapshot(): BackendSnapshot[] {
    return this.backends.map((b) => ({
      id: b.id,
      inFlight: b.inFlight,
      prefixBlocks: b.prefixes.size,
      completed: b.completed,
      failed: b.failed,
      rejected: b.rejected,
      aborted: b.aborted,
      expired: b.expired,
      ttftEwmaMs: b.ttftEwmaMs,
      prefillDebtBlocks: Math.round(b.prefillDebt),
      breaker: b.breaker.snapshot(),
    }));
  }
}
