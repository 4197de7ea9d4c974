import type { ResolvedDeployment, ResolvedGroup } from "../config/load.ts";
import { MAX_DEPLOYMENTS, MAX_SHARDS, type GroupSettings } from "../config/schema.ts";
import type { BackendMetrics, RoutedAs } from "../metrics/backend-counters.ts";
import { DecisionRing } from "../metrics/decisions.ts";
import type { GroupMetrics, HandedOver } from "../metrics/group-metrics.ts";
import { KeyCounters } from "../metrics/key-counters.ts";
import { Backend, backendKey, type SavedBreaker } from "./backend.ts";
import type { BreakerState } from "./breaker.ts";
import { enginePriority } from "./engine-priority.ts";
import { groupRateFactor } from "./learned/prefill-rate.ts";
import { LeaseTable, type Lease } from "./leases.ts";
import { usable, type Choice, type Policy, type Rng } from "./policy.ts";
import { prefixCapacities } from "./prefix-budget.ts";
import type { Lesson } from "./prefix-set.ts";
import { TenantLedger, type UsedAt } from "../tenants/ledger.ts";
import { chargesUsage, estimatedUsage } from "../tenants/estimate.ts";
import { costMicros } from "../tenants/pricing.ts";
import { CHARS_PER_TOKEN } from "./learned/chars-per-token.ts";
import { addAddress } from "../sharding/merge.ts";
import type { BackendSnapshot, GroupIds, LeaseOutcome, LeaseRelease, LeaseRenewal, LimitRefusal, RenewalOutcome, RouteDecision, RouteRefusal, RouteTenant, SpillLimit, TokenUsage, VersionRefusal } from "./protocol.ts";
import { leaseId } from "./protocol.ts";
import { createSignals, type Signals } from "./signals/index.ts";
import { POLICIES } from "./strategies/index.ts";
import { copyCost } from "./copy-cost.ts";
import { judgedBySilence, silenceLookbackMs, silentWhileOthersServe } from "./silence.ts";

/** Config versions an object routes for at once (a deploy in progress, a rollback); another is refused until its call brings its group. */
const MAX_VIEWS = 4;
/**
 * A version (never the newest) that no call used for this long, or for its own leaseTtlMs when
 * longer, is let go: its Workers are gone. Their renewals are calls, every leaseTtlMs / 3; let go
 * between two of them, a version with a longer TTL than the newest's left its live leases the
 * newest's, and the object reclaimed them under running requests.
 */
const VIEW_IDLE_MS = 60_000;
/**
 * Share of the prefix budget whose blocks the live leases may take back if they fail; past it a
 * lease's new blocks stay learned whatever its outcome. A lesson is a few numbers (it once copied
 * its blocks, and this bounded their memory); the limit is kept so routing stays as it was.
 */
const LESSON_SHARE = 0.25;

/**
 * The longest a 429's Retry-After spares its backend: a longer one is taken as this, and the
 * backend asked again after it (its answer, if it still refuses, says for how long).
 */
const REST_MAX_MS = 60_000;
/**
 * A rest is saved (with its backend's breaker) when it goes this far past the one saved: a burst
 * of 429s with the same Retry-After, each a little later, is one write, and a restart loses at
 * most this much of it.
 */
const REST_SAVE_SLACK_MS = 1_000;

/** No backends: what a route call of a Worker that names none passes over. */
const NONE: readonly string[] = [];

/**
 * Outcomes after which the backend did not hold the prompt: it failed, refused it, or was too
 * busy to take it. What routing taught its prefix set is taken back. A client that left (or the
 * gateway's own deadline) left a backend that had the prompt, and prefilled it.
 */
const NOT_SERVED: ReadonlySet<LeaseOutcome> = new Set<LeaseOutcome>(["upstream-error", "rejected", "rate-limited"]);

/** One config version of the group, as its Workers route with it. */
interface View {
  group: ResolvedGroup;
  /** In the order of its deployments. */
  backends: Backend[];
  /** Its strategy, and what it asks it: the chain is set for each call, the cursor kept from the last one. */
  policy: Policy;
  request: { chain: ArrayLike<number>; blocks: number; cursor: number; readonly settings: GroupSettings; readonly signals: Signals };
  /** Its strategy places requests by prefix match: the chosen backend's prefix set learns each chain. */
  learns: boolean;
  usedAt: number;
  /** The registry's revision of the version (0 outside it); the highest, then the latest installed, is the newest. */
  rev: number;
  /** Install order. */
  seq: number;
}

/** An active health probe the Durable Object should send. */
export interface ProbeTarget {
  key: string;
  url: string;
  timeoutMs: number;
}

/** Whether the lease is a trial of its backend's current half-open period (an earlier period's has no say). */
function isTrial(lease: Lease, b: Backend): boolean {
  return lease.trialOf >= 0 && lease.trialOf === b.breaker.opened;
}

/**
 * Routing state of one model group: per-backend in-flight counts, prefix sets and breakers, and
 * the leases that hold in-flight slots. Picking a backend and taking its slot happen in one call,
 * so a burst of identical prompts cannot all see the same idle backend.
 *
 * A call routes with the caller's config version (a view: settings and backends in order); the
 * state under the views is kept per server (id and URL), so versions that name the same server
 * share it. A server no version names is let go once nothing is in flight on it.
 */
export class GroupRouter {
  readonly name: string;
  private readonly views = new Map<string, View>();
  private readonly backends = new Map<string, Backend>();
  /** Backends no version names that still have leases in flight. */
  private readonly orphans = new Set<Backend>();
  /** Backends a server's fresh start replaced (startAfresh) that still have leases in flight: their counts are carried once those end. */
  private readonly superseded = new Set<Backend>();
  private readonly leases = new LeaseTable();
  /** Drawn when the router is made, once per object's life: what its lease ids begin with (leaseId). */
  readonly incarnation: string;
  private seq = 0;
  private installs = 0;
  private readonly rng: Rng;
  /** What is measured of each request before its strategy picks, shared by the versions (and so are the hot prefixes' counts). */
  private readonly signals = createSignals();
  /** One TTL for every lease, the longest of the versions': none renews slower than it. */
  private leaseTtlMs = 0;
  private lessonLimit = 0;
  private dropped: { versions: string[]; backends: string[] } = { versions: [], backends: [] };
  /** The registry removed the group at this revision: nothing takes new requests until a later one installs it again. */
  private retiredRev = -1;
  /** Removed by the registry, and not installed again since (settle keeps it): its object keeps nothing in storage but that. */
  retired = false;
  /** Some prefix set changed since the last takeAffinityChanges. */
  affinityPending = false;
  /** When the last of its backends' rests after a 429 ends (Backend.restingUntil). */
  private restingUntil = 0;
  /** Leases taken back from their Workers' renewals (after this object restarted). */
  adopted = 0;
  /** Until then it cannot say what is in flight (restarted): inFlightKnown. -Infinity when it always could. */
  inFlightKnownAt = -Infinity;
  /** The virtual keys that route here: their share of limits, and the usage to send to the tenants object. */
  readonly ledger = new TenantLedger();
  /** The virtual keys' totals since the object started, for GET /metrics. */
  private readonly keyCounters = new KeyCounters();
  /** The last decisions, for the dashboard. */
  readonly decisions = new DecisionRing();
  private readonly refusals = { "no-backend": 0, "at-capacity": 0 };
  /**
   * Per deployment id, what its addresses counted that were let go: a restarted pod's old address,
   * or every address of one that moved to another shard's object (the group's `shards` or its
   * deployments changed), which counts its requests from then on. Its series is the sum over the
   * objects, and goes on from there, where dropping them would make every counter fall, which
   * Prometheus reads as a reset. Kept while the group has the id, as a scrape says (GroupIds), and
   * at most MAX_DEPLOYMENTS of them: an object no one scrapes, whose servers register a new id at
   * each restart (a pod's address), would else keep one for every restart; the longest-kept goes
   * first (its series then falls, as a counter reset).
   */
  private readonly carried = new Map<string, BackendMetrics>();
  /** The counts the objects of shards the group gave up handed to this one (GroupMetrics.handedOver), by object name: at most one per shard. */
  private readonly handed = new Map<string, GroupMetrics>();

  constructor(name: string, rng: Rng = Math.random) {
    this.name = name;
    this.rng = rng;
    this.incarnation = Math.floor(rng() * 0x7fffffff).toString(36);
  }

  get leaseCount(): number {
    return this.leases.size;
  }

  /**
   * The object restarted with the versions an earlier incarnation saved: that one's leases may still
   * run, and it learns of them only from their renewals, each within leaseTtlMs (a holder's timer
   * renews every leaseTtlMs / 3). An object that saved no version gave no lease. `liveUntil`, what
   * that incarnation saved of leasesRunUntil: none of its leases runs past it, so a time past (the
   * object was idle when evicted) leaves nothing unknown; undefined from an object of a release
   * that saved none.
   */
  restarted(now: number, liveUntil: number | undefined): void {
    this.inFlightKnownAt = Math.min(liveUntil ?? Infinity, now + this.leaseTtlMs);
  }

  /**
   * What to save as the time until which its leases may run, when `saved` falls short of a live
   * lease's expiry (each is at most leaseTtlMs from now); null when it does not, or none is live.
   * Half a TTL past that, so leases given without a pause have it saved once per leaseTtlMs / 2,
   * not once per request.
   */
  leasesRunUntil(saved: number, now: number): number | null {
    const latest = now + this.leaseTtlMs;
    if (this.leases.size === 0 || saved >= latest) return null;
    return latest + this.leaseTtlMs / 2;
  }

  /** Whether its in-flight counts are the truth: not after a restart (restarted) while a lease still running may not have renewed yet. */
  inFlightKnown(now: number): boolean {
    return now >= this.inFlightKnownAt;
  }

  /** Retired, and known to have nothing in flight: what it counts changes no more (handOver). */
  doneServing(now: number): boolean {
    return this.retired && this.inFlightKnown(now) && this.leases.size === 0 && ![...this.backends.values()].some((b) => b.inFlight > 0);
  }

  /** Earliest lease expiry, for the alarm that reclaims leaked slots. */
  get nextExpiry(): number | null {
    return this.leases.nextExpiry();
  }

  knows(version: string): boolean {
    return this.views.has(version);
  }

  /** The newest version's group; undefined before the first install. */
  get newest(): ResolvedGroup | undefined {
    return this.newestView()?.group;
  }

  /** The versions it routes for, newest first. */
  versions(): string[] {
    return [...this.views.values()].sort((a, b) => b.seq - a.seq).map((v) => v.group.version);
  }

  /** The highest registry revision it has seen of the group: a Worker whose version is older refreshes its fleet. */
  get rev(): number {
    return Math.max(this.newestView()?.rev ?? 0, this.retiredRev);
  }

  /**
   * Learns a config version. The newest (highest revision, then latest installed) is the one whose
   * settings the shared state takes, and the one that says which servers take new requests.
   */
  install(group: ResolvedGroup, now: number): void {
    // A version newer than any the object had, or than its retirement: the servers it names that
    // took no part here until now (given up, or the group retired) start afresh (startAfresh).
    const rejoining = group.rev > this.rev ? this.currentBackends() : null;
    const known = this.views.get(group.version);
    if (known) {
      known.usedAt = now;
      // The same content again at a later revision (a drain undone) is the newest again.
      if (group.rev > known.rev) {
        known.rev = group.rev;
        if (rejoining) {
          known.backends.forEach((b, i) => {
            if (!rejoining.has(b)) this.startAfresh(b, group.deployments[i] as ResolvedDeployment, group);
          });
        }
        this.settle();
      }
      return;
    }
    const backends = group.deployments.map((d) => {
      const key = backendKey(d.id, d.baseUrl);
      let b = this.backends.get(key);
      if (b && rejoining && !rejoining.has(b)) b = this.startAfresh(b, d, group);
      if (!b) this.backends.set(key, (b = new Backend(d, group)));
      return b;
    });
    const policy = POLICIES[group.strategy];
    const request = { chain: [], blocks: 0, cursor: 0, settings: group, signals: this.signals };
    this.views.set(group.version, { group, backends, policy, request, learns: policy.reads.includes("prefix"), usedAt: now, rev: group.rev, seq: ++this.installs });
    while (this.views.size > MAX_VIEWS) {
      let lru: View | undefined;
      const newest = this.newestView();
      for (const v of this.views.values()) if (v !== newest && v.group.version !== group.version && (!lru || v.usedAt < lru.usedAt)) lru = v;
      this.dropView(lru as View);
    }
    this.settle(now);
  }

  /** The servers that take part in routing: the newest version's, unless the group was retired since. */
  private currentBackends(): Set<Backend> {
    const newest = this.newestView();
    return new Set(newest && newest.rev >= this.retiredRev ? newest.backends : []);
  }

  /**
   * A server held from before that rejoins (a version made newest names it again after the object
   * gave it up or was retired) starts afresh, as a server that changes shard does: it served
   * through another shard's object since, or left the group, so what this object knew of it — its
   * prefix set, breaker, rest, learned figures, queue — is stale, and whether it still held was
   * only how soon it came back (versions are kept a minute, VIEW_IDLE_MS). A new Backend takes its
   * place in every version; what it counted is carried, as a let-go address's is, and its leases
   * still in flight end on the old one. Its saved breaker and prefix set are written over with the
   * fresh ones (a retired object's were let go with the rest: `retired`). A version that keeps its
   * servers (a deploy, a drain) changes nothing of theirs.
   */
  private startAfresh(old: Backend, d: ResolvedDeployment, group: ResolvedGroup): Backend {
    const fresh = new Backend(d, group);
    this.backends.set(old.key, fresh);
    for (const v of this.views.values()) {
      const i = v.backends.indexOf(old);
      if (i >= 0) v.backends[i] = fresh;
    }
    if (!this.retired) {
      fresh.breakerDirty = true;
      fresh.affinityDirty = this.affinityPending = true;
    }
    // What it saved is deleted at once: its prefix set is saved again only at the next snapshot, and
    // an object reset before then would restore the stale one into the fresh server.
    this.dropped.backends.push(old.key);
    if (old.inFlight > 0) this.superseded.add(old);
    else this.carry(old);
    return fresh;
  }

  /** The registry removed the group: no server takes new requests; leases in flight finish. */
  retire(rev: number): void {
    if (rev <= this.rev) return;
    this.retiredRev = rev;
    this.settle();
  }

  /**
   * Picks a backend of `version` and takes its slot. `exclude`: ids of backends this request
   * already failed on. A backend whose breaker is open is never picked; a half-open one takes a
   * few trials. A request whose virtual key is over a limit is refused before any of that.
   * `failover`: the attempt follows a failed one or serves a fallback group (counted as such).
   * `blocks`: the prompt's size in blocks when its chain was cut short of it (RouteCall.blocks).
   * `spill`: a shard's first call (RouteCall.spill); refused, nothing taken, when the pick would
   * keep the prompt waiting longer. `passedOn`: RouteCall.passedOn. `othersLeft`: RouteCall.othersLeft;
   * refused with `spill`, nothing taken, when every backend that could take the request rests after a 429.
   * `unreachable`: RouteCall.unreachable, taken out of the pick as `exclude` is, but no failover;
   * counted unless `unreachableCounted` (RouteCall.unreachableCounted). `media`: RouteCall.media.
   * `partial`: RouteCall.partial; its lease teaches nothing.
   * Admit → signals → pick → commit (src/routing/policy.ts): only the pick is the strategy's.
   */
  route(version: string, chain: ArrayLike<number>, exclude: readonly string[], now: number, tenant?: RouteTenant, failover = false, blocks?: number, spill?: SpillLimit, passedOn = false, othersLeft = false, unreachable: readonly string[] = NONE, media = false, unreachableCounted = false, partial = false): RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal {
    const view = this.views.get(version);
    if (!view) return { refused: "unknown-version", rev: this.rev };
    // Before the key's limits: a lease past its TTL whose alarm is late holds none of its max_parallel.
    if (this.leases.size > 0) this.expire(now);
    if (tenant) {
      const over = this.ledger.check(tenant, now);
      if (over) {
        if (!passedOn || over.limit === "budget") this.keyCounters.limited(tenant.id, over.limit);
        return { refused: "limited", limit: over.limit, retryAfterMs: over.retryAfterMs, rev: this.rev };
      }
    }
    view.usedAt = now;
    if (this.views.size > 1) this.dropIdleViews(now);
    if (this.admit(view, exclude, now, unreachable, unreachableCounted) === 0) return this.refuse("no-backend");
    // Most route calls come with no backend resting: they pay one comparison.
    if (this.restingUntil > now && this.spareResting(view.backends, now, othersLeft) === null) return { refused: "spill", rev: this.rev };
    const { policy, request } = view;
    for (const name of policy.reads) this.signals[name].produce(view.backends, chain, view.group, now);
    request.chain = chain;
    // No size (an older Worker sends none), or none a finite number above the chain's length: the chain's.
    request.blocks = blocks !== undefined && Number.isFinite(blocks) && blocks > chain.length ? blocks : chain.length;
    const choice = policy.pick(view.backends, request, this.rng);
    if (!choice) return this.refuse("at-capacity");
    if (spill && this.spills(view, choice, spill)) return { refused: "spill", rev: this.rev };
    return this.commit(view, choice, chain, exclude, now, tenant, failover, media, partial);
  }

  /**
   * Whether a shard's pick would keep the prompt waiting longer than the Worker expects the next
   * shard to (RouteCall.spill, which counts the prompt's prefill there). A shared prefix the pick
   * holds, which prefix-aware would not copy between this shard's own backends for free, is priced
   * the same way on its way to the next shard: by the blocks it would evict there, this cache's
   * fill standing in for that one's — all but the blocks every shard holds already (a system
   * prompt the Worker spreads over them). Unpriced, one object kept a document or a group prompt
   * home where shards sent it on, and four shards of one worker each lost 4–10% of one object's
   * kv_hit on b2b-saas.
   */
  private spills(view: View, choice: Choice, spill: SpillLimit): boolean {
    const b = view.backends[choice.index] as Backend;
    const wait = waitMs(b, view.request.blocks - choice.matched);
    if (wait <= spill.overMs) return false;
    const p = this.signals.prefix;
    const copied = choice.matched - spill.spreadBlocks;
    const priced = view.policy.reads.includes("prefix") && p.shared && copied > 0 && !p.replicable[choice.index] && b.drainPerMs > 0;
    return !priced || wait > spill.overMs + copyCost(b.cacheFill, copied) / b.drainPerMs;
  }

  /**
   * Marks which of the view's backends may take the request, with their caps, weights and prefill
   * debt as of now; how many may. One the Worker cannot reach (`unreachable`) may not, and is
   * counted so unless the Worker counted it for this request already (`counted`).
   */
  private admit(view: View, exclude: readonly string[], now: number, unreachable: readonly string[], counted: boolean): number {
    let admissible = 0;
    for (let i = 0; i < view.backends.length; i++) {
      const b = view.backends[i] as Backend;
      b.drain(now);
      const d = view.group.deployments[i] as ResolvedDeployment;
      b.maxInFlight = d.maxInFlight;
      b.weight = d.weight;
      const wasOpen = b.breaker.state === "open";
      const passed = unreachable.length > 0 && unreachable.includes(b.id);
      if (passed && b.admitted && !counted) b.counters.failures.unreachable++;
      b.available = b.admitted && !passed && !exclude.includes(b.id) && b.breaker.admits(now);
      // A cool-down that ended here is a transition like any other: persisted and logged.
      if (wasOpen && b.breaker.state !== "open") this.breakerChanged(b, now, "open");
      if (b.available) admissible++;
    }
    return admissible;
  }

  /**
   * Takes out of the pick the backends resting after a 429 (its Retry-After not over), while
   * another can take the request: else every request routed there meets the same 429, with room
   * elsewhere. With none, they are asked all the same, and what they answer reaches the client —
   * unless another shard of the group is left to ask (`othersLeft`): then null, the request is
   * passed on, and this shard is asked again last, without it. Else how many it took out.
   */
  private spareResting(backends: readonly Backend[], now: number, othersLeft: boolean): number | null {
    let resting = 0;
    let other = false;
    for (const b of backends) {
      if (!b.available) continue;
      if (b.restingUntil > now) resting++;
      else if (usable(b)) other = true;
    }
    if (resting === 0) return 0;
    if (!other) return othersLeft ? null : 0;
    for (const b of backends) if (b.available && b.restingUntil > now) b.available = false;
    return resting;
  }

  /** Takes the chosen backend's slot and its share of prompt work, teaches it the chain when a prefix match placed it, and opens the lease. */
  private commit(view: View, choice: Choice, chain: ArrayLike<number>, exclude: readonly string[], now: number, tenant: RouteTenant | undefined, failover: boolean, media: boolean, partial: boolean): RouteDecision {
    const g = view.group;
    view.request.cursor = (choice.index + 1) % view.backends.length;
    const b = view.backends[choice.index] as Backend;
    b.inFlight++;
    // The blocks it must prefill there join that backend's queue of prompt work: those past its
    // match, still being prefilled or not (engines prefill in order; it waits behind that prefill),
    // to the prompt's end, past the chain's when it was cut.
    const blocks = view.request.blocks - choice.matched;
    const ahead = b.prefillDebt;
    b.prefillDebt += blocks;
    b.queued += blocks;
    // Before it is learned: learning moves the chain's end past the match. A request with no
    // prompt to hash (embeddings, vLLM's prompt_embeds) is none: what the engine says it had
    // cached of it, the set had nothing to predict with.
    const evidence = chain.length > 0 && (!view.learns || !stillPrefilling(b, chain, choice.matched, now));
    // Learned now, not when the answer comes: a burst of the same prompt must find it at once.
    const lesson = view.learns && chain.length > 0 ? this.teach(b, chain, choice.matched) : null;
    // Ready when the backend's queue, this prompt included, has drained.
    const pending = view.learns && choice.matched < chain.length && b.drainPerMs > 0 ? b.pending.add(choice.matched, chain[choice.matched] as number, now + b.prefillDebt / b.drainPerMs) : -1;
    const lease = leaseId(this.incarnation, ++this.seq);
    const as: RoutedAs = failover || exclude.length > 0 ? "failover" : choice.reason;
    b.counters.routed(as);
    const decision = this.decisions.add(now, b.id, as, choice.matched, chain.length);
    const predictedCached = b.tokensOf(choice.matched);
    // A chain cut at maxPrefixBlocks is not the whole prompt: no measure of its characters. Nor is
    // one with media, each a fixed number of blocks whatever the engine spends on it; and its match,
    // stand-ins included, is no measure of what the engine holds (a VLM's 576 tokens an image read as
    // evictions of the stand-in's 1,024 shrank the learned capacity to its floor).
    const total = chain.length < g.maxPrefixBlocks && !media ? chain.length : -1;
    const matched = evidence && !media ? choice.matched : -1;
    const recency = view.learns && chain.length > 0 ? b.prefixes.matchRecency : NaN;
    // A partial prompt's usage counts what its chain never read (RouteCall.partial), cut or not: the
    // Worker says so, as a chain cut at maxPrefixBlocks looks the same whether it is. Its usage
    // teaches nothing.
    this.leases.add(lease, { backend: b, expiresAt: now + this.leaseTtlMs, routedAt: now, blocks, queuedTo: b.queued, trialOf: b.breaker.sent() ? b.breaker.opened : -1, lesson, key: tenant?.id ?? null, recordsUsage: tenant !== undefined && tenant.recordsUsage !== false, decision, predictedCached, pending, matched, total, recency, ahead, ...(partial ? { teaches: false as const } : {}) });
    if (tenant) {
      this.ledger.took(tenant, now);
      if (!(tenant.counted ?? tenant.admitted)) this.keyCounters.request(tenant.id);
    }
    const answer: RouteDecision = { backendId: b.id, lease, reason: choice.reason, matched: choice.matched, total: chain.length, routedAt: now, rev: this.rev, inFlight: this.leases.size };
    if (g.shards > 1) shardWait(view.backends, answer);
    if ((g.deployments[choice.index] as ResolvedDeployment).schedulingPolicy === "priority") answer.priority = enginePriority(now, blocks, b.drainPerMs);
    return answer;
  }

  /** The backend's prefix set learns the chain; what it learned, for the lease to take back, or null when nothing new or past the lessons' memory limit. */
  private teach(b: Backend, chain: ArrayLike<number>, matched: number): Lesson | null {
    const lesson = b.prefixes.learn(chain, matched);
    b.affinityDirty = this.affinityPending = true;
    // Past the limit a lesson is not kept: memory stays bounded, and the blocks stay learned.
    return lesson && this.leases.lessonBlocks + lesson.blocks > this.lessonLimit ? null : lesson;
  }

  /**
   * Idempotent: a lease already released or reclaimed is ignored, so counts never go negative.
   * One this object does not hold (it restarted since the lease was taken, or the lease expired
   * first) has no slot to give back and no say on its backend, but the usage it carries is still
   * its key's.
   */
  release(r: LeaseRelease, now: number): void {
    // Only a release with usage to record names its key; one that came before is not counted twice.
    const again = r.key !== undefined && this.leases.endedRecently(r.lease);
    const lease = this.leases.end(r.lease);
    if (!lease) {
      if (!again) this.usedUnheld(r, now);
      return;
    }
    const b = lease.backend;
    b.inFlight--;
    // The debt as of now first: what it is set against (the work queued since) is now's.
    b.drain(now);
    const served = r.ttftMs !== undefined || r.outcome === "ok";
    settleDebt(b, lease, served);
    if (served) b.servedAt = now;
    // A non-streamed timeout (the gateway's own limit) or a failure judged the request's, unless the backend served nothing while others did: then it failed.
    const outcome = this.silentWhileOthersServe(b, lease, r) ? "upstream-error" : r.outcome;
    // A failure that was silence: no probe of its health endpoint undoes what it says (src/routing/breaker.ts).
    const silent = r.timedOut === true && outcome === "upstream-error";
    if (lease.pending >= 0) b.pending.done(lease.pending);
    // One reclaimed at its expiry and renewed late was counted `expired` then; its breaker and its key still learn how it ended.
    if (!lease.reclaimed) b.counters.released(outcome, r.ttftMs, r.durationMs, r.usage, lease.predictedCached, r.failure);
    this.decisions.ended(lease.decision, outcome, r.ttftMs ?? null);
    const before = b.breaker.state;
    const trial = isTrial(lease, b);
    if (outcome === "ok" || outcome === "upstream-error") b.breaker.record(outcome === "ok", now, trial, silent);
    else b.breaker.abandon(trial);
    if (b.breaker.state !== before) this.breakerChanged(b, now, before);
    if (r.outcome === "rate-limited" && typeof r.retryAfterMs === "number" && r.retryAfterMs > 0) {
      b.restingUntil = Math.max(b.restingUntil, now + Math.min(r.retryAfterMs, REST_MAX_MS));
      this.restingUntil = Math.max(this.restingUntil, b.restingUntil);
      // Saved, so a restart does not send it the requests it asked to be spared (and their 429s).
      if (b.restingUntil > b.savedRestingUntil + REST_SAVE_SLACK_MS) b.breakerDirty = true;
    }
    if (lease.lesson && NOT_SERVED.has(outcome)) {
      b.prefixes.unlearn(lease.lesson);
      b.affinityDirty = this.affinityPending = true;
    }
    if (r.ttftMs !== undefined) b.ttftEwmaMs = b.ttftEwmaMs === null ? r.ttftMs : 0.8 * b.ttftEwmaMs + 0.2 * r.ttftMs;
    if (r.usage && r.outcome === "ok") this.feedBack(b, lease, r);
    if (lease.key !== null) {
      // Its renewals charged part of it already (a realtime session's): the release charges the rest.
      // A key whose usage is not recorded is charged nothing: what was read taught routing alone.
      const all = lease.recordsUsage && chargesUsage(r) ? this.charged(r, b) : undefined;
      const usage = (all && usageAfter(all, lease.charged)) ?? undefined;
      if (usage) this.keyCounters.used(lease.key, usage, r.usage === undefined);
      // One its renewals charged tokens for is a request they were spent on, however it ended.
      const served = lease.recordsUsage && (r.outcome === "ok" || lease.charged !== undefined);
      this.ledger.finished(lease.key, usage, served, this.usedAt(b.id, usage), now);
    }
    this.letGoIfOrphan(b);
  }

  /** src/routing/silence.ts, with the newest version's timeout and backends, and what the Worker saw other shards serve (a number, or none). */
  private silentWhileOthersServe(b: Backend, lease: Lease, r: LeaseRelease): boolean {
    if (!judgedBySilence(r)) return false;
    const view = this.newestView();
    const elsewhere = typeof r.othersServedAt === "number" && Number.isFinite(r.othersServedAt) ? r.othersServedAt : -Infinity;
    return view !== undefined && silentWhileOthersServe(b, lease.routedAt, silenceLookbackMs(r, view.group.nonStreamTimeoutMs), view.backends, elsewhere);
  }

  /**
   * A release of a lease this object does not hold: its usage, when it names the key and backend it
   * is for (its Worker names none for a key whose usage is not recorded: LeaseRelease.key).
   */
  private usedUnheld(r: LeaseRelease, now: number): void {
    if (typeof r.key !== "string" || typeof r.backendId !== "string" || !chargesUsage(r)) return;
    const all = this.charged(r, this.newestView()?.backends.find((b) => b.id === r.backendId));
    // Its renewals' charges an object answered (this one before it restarted or the lease expired) are not charged again.
    // A request all of whose tokens were charged so is still a request.
    const usage = (all && usageAfter(all, r.charged)) ?? (r.charged ? { prompt: 0, completion: 0, cached: 0 } : undefined);
    if (!usage) return;
    this.keyCounters.used(r.key, usage, r.usage === undefined);
    this.ledger.finishedUnheld(r.key, usage, r.outcome === "ok", this.usedAt(r.backendId, usage), now);
  }

  /**
   * What a release charges its key: the upstream's usage, or the estimate of an answer it never
   * reported (src/tenants/estimate.ts), by the backend's characters per token (the default's where
   * the backend is gone).
   */
  private charged(r: LeaseRelease, b: Backend | undefined): TokenUsage | undefined {
    if (r.usage || !r.estimate) return r.usage;
    return estimatedUsage(r.estimate, b ? b.charsPerToken : CHARS_PER_TOKEN) ?? undefined;
  }

  private usedAt(backend: string, usage: TokenUsage | undefined): UsedAt {
    return { model: this.name, backend, costMicros: usage ? costMicros(usage, this.newest?.pricing) : 0 };
  }

  /**
   * An answer's usage teaches its backend (src/routing/feedback.ts). A lease taken back from a
   * renewal knows nothing of its prediction and teaches nothing; nor does one whose chain is part
   * of its prompt (Lease.teaches). A learned capacity shares the
   * prefix budget out again; a figure that moved is saved with the prefix set's next snapshot.
   */
  private feedBack(b: Backend, lease: Lease, r: LeaseRelease): void {
    if (lease.decision < 0 || !r.usage || lease.teaches === false) return;
    const change = b.learn({ usage: r.usage, firstTokenMs: r.streamed === true ? r.ttftMs : undefined, matched: lease.matched, total: lease.total, recency: lease.recency, aheadBlocks: lease.ahead });
    if (change.capacity) {
      const newest = this.newestView();
      if (newest) this.shareCapacity(newest.group);
    }
    if (change.capacity || change.rates) b.affinityDirty = this.affinityPending = true;
    if (change.rates) this.lendRate();
  }

  /**
   * The backends that learned no prefill rate of their own borrow the others' (src/routing/learned/prefill-rate.ts):
   * whenever a rate, the versions (configured rates, backends) or a restored snapshot change what there is to lend.
   */
  private lendRate(): void {
    const backends = this.newestView()?.backends ?? [];
    const factor = groupRateFactor(backends.map((x) => x.feedback.prefillRate));
    for (const x of backends) x.borrowRate(factor);
  }

  /**
   * A lease its Worker still holds. A live one is extended. One this object does not know, and
   * did not release lately, is from before it restarted: it takes that slot again on the backend
   * the lease's version names, so in-flight counts come back to the truth. A renewal that carries
   * the lease's usage so far (a realtime session's) charges its key what was not charged yet, and
   * says whether the key's budget, when it carries one, is then spent; "unheld": the lease is not
   * held here (released already, or its version or backend unknown), and nothing was charged.
   */
  renew(r: LeaseRenewal, now: number): RenewalOutcome {
    const view = this.views.get(r.version);
    if (view) view.usedAt = now;
    const live = this.leases.extend(r.lease, now + this.leaseTtlMs);
    if (live) {
      if (r.serving === true) live.backend.servedAt = now;
      return this.chargeRenewal(live, r, now);
    }
    if (this.leases.endedRecently(r.lease)) return "unheld";
    const b = view?.backends.find((x) => x.id === r.backendId);
    if (!b) return "unheld";
    b.inFlight++;
    const key = typeof r.key === "string" ? r.key : null;
    // One reclaimed here at its expiry and renewed late (its Worker's renewals were held up) was counted then.
    const late = this.leases.expiredRecently(r.lease);
    // What an object answered having charged (this one before it restarted or reclaimed the lease) was charged before.
    const lease: Lease = { backend: b, expiresAt: now + this.leaseTtlMs, routedAt: NaN, blocks: 0, queuedTo: 0, trialOf: -1, lesson: null, key, recordsUsage: key !== null && r.recordsUsage !== false, decision: -1, predictedCached: 0, pending: -1, matched: 0, total: -1, recency: NaN, ahead: 0, ...(late ? { reclaimed: true as const } : {}), ...(r.charged ? { charged: { ...r.charged } } : {}) };
    this.leases.add(r.lease, lease);
    if (key !== null) this.ledger.took({ id: key, rpm: null, tpm: null, maxParallel: null, budget: null, admitted: true }, now);
    if (!late) this.adopted++;
    if (r.serving === true) b.servedAt = now;
    return this.chargeRenewal(lease, r, now);
  }

  /**
   * Charges a held lease's key what the renewal's usage so far holds past what it was charged
   * already (a renewal that came after a later one holds less, and changes nothing); "spent" when
   * the budget it carried is then reached, else "overTpm" when the tpm it carried is.
   */
  private chargeRenewal(lease: Lease, r: LeaseRenewal, now: number): RenewalOutcome {
    const { key } = lease;
    if (key === null || !lease.recordsUsage || !r.usage) return "held";
    const more = usageAfter(r.usage, lease.charged);
    if (more) {
      lease.charged = { ...r.usage };
      this.keyCounters.used(key, more);
      this.ledger.charge(key, more, this.usedAt(lease.backend.id, more), now);
    }
    if (r.budget !== undefined && this.ledger.overBudget(key, r.budget, now)) return "spent";
    return r.tpm !== undefined && this.ledger.overTpm(key, r.tpm, now) ? "overTpm" : "held";
  }

  /** Reclaims leases past their TTL (their Worker stopped renewing them); returns how many. */
  expire(now: number): number {
    const expired = this.leases.takeExpired(now);
    for (const lease of expired) {
      const b = lease.backend;
      b.inFlight--;
      // One reclaimed before and renewed late was counted then.
      if (!lease.reclaimed) b.counters.expired();
      this.decisions.ended(lease.decision, "expired", null);
      if (lease.key !== null) this.ledger.expired(lease.key);
      b.breaker.abandon(isTrial(lease, b));
      this.letGoIfOrphan(b);
    }
    return expired.length;
  }

  /** Lets go of versions no call used lately (never the newest; VIEW_IDLE_MS). */
  dropIdleViews(now: number): void {
    const newest = this.newestView();
    let changed = false;
    for (const v of [...this.views.values()]) {
      if (v === newest || now - v.usedAt < Math.max(VIEW_IDLE_MS, v.group.leaseTtlMs)) continue;
      this.dropView(v);
      changed = true;
    }
    if (changed) this.settle(now);
  }

  /**
   * Open and half-open backends whose next health probe is due; each is then not due for a
   * jittered interval. Only those that take requests: a probe is how an open breaker gets to close
   * for traffic, and a drained, disabled or removed server (a retired group's) has none to take.
   */
  dueProbes(now: number): ProbeTarget[] {
    const out: ProbeTarget[] = [];
    for (const b of this.backends.values()) {
      if (!needsProbe(b) || b.nextProbeAt > now) continue;
      b.nextProbeAt = now + b.probeIntervalMs * (0.5 + this.rng());
      out.push({ key: b.key, url: b.probeUrl, timeoutMs: b.probeTimeoutMs });
    }
    return out;
  }

  probed(key: string, good: boolean, now: number): void {
    const b = this.backends.get(key);
    if (!b) return;
    const before = b.breaker.state;
    b.breaker.probed(good, now);
    if (b.breaker.state !== before) this.breakerChanged(b, now, before);
  }

  /** When the object next has work of its own: a lease to reclaim or a probe to send. */
  nextWake(): number | null {
    let at = this.nextExpiry;
    for (const b of this.backends.values()) {
      if (!needsProbe(b)) continue;
      if (at === null || b.nextProbeAt < at) at = b.nextProbeAt;
    }
    return at;
  }

  /** Breakers that changed state since the last call, by backend key, to persist (and, by id, the state each left). */
  takeBreakerChanges(): { key: string; saved: SavedBreaker; backend: string; from: BreakerState }[] {
    const out: { key: string; saved: SavedBreaker; backend: string; from: BreakerState }[] = [];
    for (const b of this.backends.values()) {
      if (!b.breakerDirty) continue;
      b.breakerDirty = false;
      out.push({ key: b.key, saved: b.savedBreaker(), backend: b.id, from: b.breakerFrom ?? b.breaker.state });
      b.breakerFrom = null;
    }
    return out;
  }

  /** Each backend whose prefix set or learned figures changed since the last call: a snapshot of its `max` most recent blocks, then what it learned. */
  takeAffinityChanges(max: number): { key: string; blocks: Float64Array }[] {
    this.affinityPending = false;
    const out: { key: string; blocks: Float64Array }[] = [];
    for (const b of this.backends.values()) {
      if (!b.affinityDirty) continue;
      b.affinityDirty = false;
      const learned = b.feedback.saved();
      const set = b.prefixes.exportRecent(max);
      out.push({ key: b.key, blocks: learned.length === 0 ? set : Float64Array.from([...set, ...learned]) });
    }
    return out;
  }

  /** Versions and backends let go since the last call, whose saved state can go too. */
  takeDropped(): { versions: string[]; backends: string[] } {
    const d = this.dropped;
    this.dropped = { versions: [], backends: [] };
    return d;
  }

  /** Restores a saved breaker onto the server it judged; false when no version names that server. */
  restoreBreaker(s: SavedBreaker): boolean {
    const b = this.backends.get(backendKey(s.id, s.baseUrl));
    if (!b) return false;
    b.breaker.restore(s);
    if (typeof s.restingUntil === "number" && s.restingUntil > b.restingUntil) {
      b.restingUntil = b.savedRestingUntil = s.restingUntil;
      this.restingUntil = Math.max(this.restingUntil, s.restingUntil);
    }
    return true;
  }

  /**
   * Loads a saved snapshot: what the backend learned (its capacity first, which sizes the set),
   * then its prefix set. The blocks loaded, or null when the backend is no longer kept or the
   * snapshot is of an older format with nothing learned (it can go).
   */
  restoreAffinity(key: string, saved: Float64Array): number | null {
    const b = this.backends.get(key);
    if (!b) return null;
    const setLength = b.restoreLearned(saved);
    const newest = this.newestView();
    if (setLength < saved.length && newest) this.shareCapacity(newest.group);
    if (b.feedback.prefillRate.learnedRate !== null) this.lendRate();
    const loaded = b.prefixes.importRecent(saved.subarray(0, setLength));
    return loaded === 0 && setLength > 0 && setLength === saved.length ? null : loaded;
  }

  snapshot(fleet?: GroupIds): BackendSnapshot[] {
    const shows = this.shows(fleet);
    return this.kept()
      .filter((b) => shows(b.id, b.inFlight))
      .map((b) => b.snapshot());
  }

  /** The counters GET /metrics renders, backends in the order of snapshot(), then the counts carried from let-go addresses. */
  metrics(fleet?: GroupIds): GroupMetrics {
    const shows = this.shows(fleet);
    const listed = this.kept().filter((b) => shows(b.id, b.inFlight));
    // The counts of a deployment the group no longer has end with its series, as they would in the
    // object that routed to it: once nothing is in flight on it here (else its series would fall first).
    const ids = new Set(listed.map((b) => b.id));
    for (const id of this.carried.keys()) if (!shows(id, 0) && !ids.has(id)) this.carried.delete(id);
    const current = this.currentBackends();
    // A carried entry comes after its id's live ones: scrapedGroup adds its counts to theirs.
    const backends = [...listed.map((b) => b.metrics(current.has(b))), ...this.carried.values()];
    const handedOver: HandedOver[] = [];
    for (const [object, m] of this.handed) {
      m.backends = m.backends.filter((b) => shows(b.id, 0));
      handedOver.push({ object, metrics: m });
    }
    return { group: this.name, backends, keys: this.keyCounters.snapshot(), refusals: { ...this.refusals }, ...(handedOver.length > 0 ? { handedOver } : {}) };
  }

  /**
   * Its counts, once the registry retired it and nothing is in flight here: they change no more
   * (it takes no new request), so the group's own object can carry them (adopt) and it need not be
   * asked again. Null until then: for leaseTtlMs after a restart too, while a lease given before may
   * still renew (restarted).
   */
  handOver(now: number): GroupMetrics | null {
    if (!this.doneServing(now)) return null;
    const { handedOver: _, ...own } = this.metrics();
    return own;
  }

  /** What the objects of shards the group gave up handed over: one's later hand-over (the same counts, or more) replaces its earlier. */
  adopt(handed: readonly HandedOver[]): void {
    for (const h of handed) {
      this.handed.delete(h.object);
      this.handed.set(h.object, h.metrics);
    }
    while (this.handed.size > MAX_SHARDS) this.handed.delete(this.handed.keys().next().value as string);
  }

  /**
   * Whether to list a deployment, by its id and what it has in flight here: one the group no longer
   * has, as `fleet` says, only while requests are in flight on it (GroupIds). A caller's fleet
   * behind what this object knows may not know of a deployment added since: all are listed.
   */
  private shows(fleet: GroupIds | undefined): (id: string, inFlight: number) => boolean {
    if (!fleet || fleet.rev < this.rev) return () => true;
    const ids = new Set(fleet.ids);
    return (id, inFlight) => ids.has(id) || inFlight > 0;
  }

  /** The newest version's backends in its order, then those only other versions (or leases) still name. */
  private kept(): Backend[] {
    const seen = new Set<Backend>();
    const views = [...this.views.values()].sort((a, b) => (newer(a, b) ? -1 : 1));
    for (const v of views) for (const b of v.backends) seen.add(b);
    for (const b of this.orphans) seen.add(b);
    // A server's old state while a lease of it runs (startAfresh): its counts and that lease, shown until carried.
    for (const b of this.superseded) seen.add(b);
    return [...seen];
  }

  private refuse(refused: Exclude<RouteRefusal["refused"], "spill">): RouteRefusal {
    this.refusals[refused]++;
    return { refused, rev: this.rev };
  }

  private newestView(): View | undefined {
    let newest: View | undefined;
    for (const v of this.views.values()) if (!newest || newer(v, newest)) newest = v;
    return newest;
  }

  private dropView(v: View): void {
    this.views.delete(v.group.version);
    this.dropped.versions.push(v.group.version);
  }

  /**
   * After the versions changed: servers no version names are let go (or kept as orphans while
   * leases are in flight there), every server takes the settings of the newest version naming it,
   * only the servers the newest version names as active take new requests (whatever version a
   * caller routes with: a drain holds for a Worker that has not heard of it yet), and the prefix
   * budget of the newest version is shared out again, and so is the group's learned prefill rate.
   */
  private settle(now?: number): void {
    const named = new Set<Backend>();
    const oldestFirst = [...this.views.values()].sort((a, b) => (newer(a, b) ? 1 : -1));
    for (const v of oldestFirst) {
      v.group.deployments.forEach((d, i) => {
        const b = v.backends[i] as Backend;
        b.configure(d, v.group);
        named.add(b);
      });
    }
    this.orphans.clear();
    for (const b of [...this.backends.values()]) {
      if (named.has(b)) continue;
      this.orphans.add(b);
      this.letGoIfOrphan(b);
    }
    const newest = oldestFirst.at(-1);
    this.retired = this.retiredRev > (newest?.rev ?? -1);
    for (const b of this.backends.values()) b.admitted = false;
    if (!newest) return;
    if (newest.rev >= this.retiredRev) {
      newest.group.deployments.forEach((d, i) => {
        if (d.state === "active") (newest.backends[i] as Backend).admitted = true;
      });
    }
    const ttl = Math.max(...oldestFirst.map((v) => v.group.leaseTtlMs));
    // A shorter TTL (a longer one's version let go): no lease may outlive it from now, or leases
    // taken since, which expire sooner, would wait behind it to be reclaimed.
    if (ttl < this.leaseTtlMs && now !== undefined) this.leases.capExpiry(now + ttl);
    this.leaseTtlMs = ttl;
    this.lessonLimit = newest.group.prefixBudgetBlocks * LESSON_SHARE;
    this.shareCapacity(newest.group);
    this.lendRate();
  }

  /** Sizes every prefix set by its backend's KV capacity (learned, else configured), within the group's budget; a smaller one drops its oldest blocks. */
  private shareCapacity(newest: ResolvedGroup): void {
    const all = [...this.backends.values()];
    const caps = prefixCapacities(
      all.map((b) => b.capacityBlocks),
      newest.prefixBudgetBlocks,
    );
    all.forEach((b, i) => {
      const cap = caps[i] as number;
      if (b.prefixes.capacity !== cap) b.prefixes.resize(cap);
    });
  }

  private letGoIfOrphan(b: Backend): void {
    if (b.inFlight > 0) return;
    if (this.superseded.delete(b)) this.carry(b);
    if (!this.orphans.has(b)) return;
    this.orphans.delete(b);
    this.backends.delete(b.key);
    this.dropped.backends.push(b.key);
    this.carry(b);
  }

  /** What `b` counted, carried under its id (`carried`). */
  private carry(b: Backend): void {
    const had = this.carried.get(b.id);
    this.carried.set(b.id, had ? addAddress(had, b.metrics(false)) : b.metrics(false));
    if (this.carried.size > MAX_DEPLOYMENTS) this.carried.delete(this.carried.keys().next().value as string);
  }

  private breakerChanged(b: Backend, now: number, from: BreakerState): void {
    b.breakerDirty = true;
    b.breakerFrom ??= from;
    // A backend just opened is probed soon: a short outage should not wait out openMs.
    if (b.breaker.state === "open") b.nextProbeAt = now + b.probeIntervalMs * (0.5 + this.rng());
  }
}

function newer(a: View, b: View): boolean {
  return a.rev !== b.rev ? a.rev > b.rev : a.seq > b.seq;
}

/** How long a prompt of `blocks` uncached blocks would wait on `b` for its first token: its queued prompt work, then its own; 0 with no drain rate to go by. */
function waitMs(b: Backend, blocks: number): number {
  return b.drainPerMs > 0 ? (b.prefillDebt + blocks) / b.drainPerMs : 0;
}

/** A shard's least-queued backend that may take requests, as the Worker weighs shards (RouteDecision.waitMs, blockMs). */
function shardWait(backends: readonly Backend[], decision: RouteDecision): void {
  let least = Infinity;
  let drainPerMs = 0;
  for (const b of backends) {
    if (!b.available || b.drainPerMs <= 0) continue;
    const wait = waitMs(b, 0);
    if (wait < least) {
      least = wait;
      drainPerMs = b.drainPerMs;
    }
  }
  if (drainPerMs === 0) return;
  decision.waitMs = least;
  decision.blockMs = 1 / drainPerMs;
}

/**
 * Whether part of the backend's match is still being prefilled (src/routing/pending-prefills.ts):
 * such a decision says nothing of the set's size, as an engine that prefills it in the same batch
 * computes it again and reports no hit. A match that ends at the end of a chain, with more after
 * it, is a conversation coming back: its client has the previous turn's answer, so that prompt
 * was computed, whatever the estimate says and whether or not its release has arrived yet.
 */
function stillPrefilling(b: Backend, chain: ArrayLike<number>, matched: number, now: number): boolean {
  if (matched === 0 || b.pending.ready(chain, matched, now) >= matched) return false;
  return matched === chain.length || b.prefixes.isInterior(chain[matched - 1] as number);
}

/**
 * What a request that ended says of its backend's queue of prompt work. One whose first token
 * came was prefilled, and an engine prefills in arrival order: every block queued before its own
 * is done too, so the debt is at most what was queued after it — the drain estimate, which runs
 * at the configured rate, may still hold some of that. Its own block count is not what to take
 * off: the drain took it long ago for a request that ran its course, and taking it again erased
 * the work of requests routed since, so the backend looked idle to the next arrival while it was
 * prefilling (a burst of closed-loop sessions ending together then went back to it together).
 * One that ended unanswered (failed, left) was dropped by the engine: only what of its own work
 * the estimate still holds goes.
 */
function settleDebt(b: Backend, lease: Lease, prefilled: boolean): void {
  const after = b.queued - lease.queuedTo;
  if (prefilled) b.prefillDebt = Math.min(b.prefillDebt, after);
  else b.prefillDebt -= Math.min(lease.blocks, Math.max(0, b.prefillDebt - after));
}

/** An open or half-open breaker of a server that takes requests: its health probes are how it closes for them. */
/**
 * A breaker its silence opened is not probed: a hung engine's health endpoint says ok all the same
 * (src/routing/breaker.ts), and probing it would wake the object every probeIntervalMs for as long
 * as no request comes to give it its trials.
 */
function needsProbe(b: Backend): boolean {
  return b.admitted && b.breaker.state !== "closed" && !b.breaker.silent;
}

/**
 * What `total` holds past `charged` (both a lease's usage since it began), field by field; null
 * when nothing. A renewal that came late, after a later one, holds less: nothing more.
 */
function usageAfter(total: TokenUsage, charged: TokenUsage | undefined): TokenUsage | null {
  if (!charged) return total;
  const prompt = Math.max(0, total.prompt - charged.prompt);
  const completion = Math.max(0, total.completion - charged.completion);
  if (prompt === 0 && completion === 0) return null;
  return { prompt, completion, cached: Math.min(prompt, Math.max(0, total.cached - charged.cached)), cacheReported: false };
}
