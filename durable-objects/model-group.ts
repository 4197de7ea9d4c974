import { DurableObject } from "cloudflare:workers";
import { gatewayKeysOf, type ResolvedGroup } from "../src/config/load.ts";
import { PUBLIC_REACH, reachOf, type GatewayKeys, type UpstreamReach } from "../src/config/upstream-access.ts";
import { backendKey, type SavedBreaker } from "../src/routing/backend.ts";
import { GroupRouter } from "../src/routing/group-router.ts";
import { shardOfObject } from "../src/sharding/partition.ts";
import { logEvent } from "../src/logging/event-log.ts";
import type { DecisionView } from "../src/metrics/decisions.ts";
import type { GroupMetrics, HandedOver } from "../src/metrics/group-metrics.ts";
import { packKeys } from "../src/metrics/key-columns.ts";
import type { GroupIds, GroupStatus, LeaseRelease, LeaseRenewal, LimitRefusal, ModelGroupRpc, RenewalAnswers, RouteCall, RouteDecision, RouteRefusal, VersionRefusal } from "../src/routing/protocol.ts";
import type { UnsentUsage } from "../src/tenants/ledger.ts";
import type { TenantsRpc, UsageRow } from "../src/tenants/protocol.ts";
import { TENANTS_NAME } from "../src/tenants/tenants-name.ts";
import { fetchDeployment } from "../src/upstream/reach-fetch.ts";

/** Blocks per backend kept in the affinity snapshot, the recent working set: 32 KiB each, and 16 bytes a chain end. */
const SNAPSHOT_BLOCKS = 4096;
/**
 * Storage keys. Every value is small whatever the size of the group — a version's config, one
 * server's breaker, one server's snapshot (under 100 KiB) — far under the 2 MB a value may hold.
 */
const VIEW = "view:";
const BREAKER = "breaker:";
const AFFINITY = "affinity:";
/**
 * Virtual keys' usage not delivered, saved while the tenants object fails (one copy, each save in
 * place of the last): `usage:<part>`, parts of USAGE_ROWS_PER_VALUE rows, the batch's first.
 */
const USAGE = "usage:";
/** A row is at most ~1.2 KB (names of 256 characters, 2 bytes each outside Latin-1): a part stays far under 2 MB. */
const USAGE_ROWS_PER_VALUE = 500;
/** The registry revision at which it removed the group, if it did. */
const RETIRED = "retired";
/** Until when leases it gave may still run (GroupRouter.leasesRunUntil): a restart before then cannot say what is in flight. */
const LIVE_UNTIL = "live-until";
/** storage.put and storage.delete take at most this many keys a call. */
const KEYS_PER_CALL = 128;
/**
 * Virtual keys' usage waits this long in memory and goes to the tenants object as one batch: a
 * key's spend there is at most this far behind (plus the call), and an object that dies loses at
 * most this much of it. A send that fails saves what is not delivered (USAGE), so while the
 * tenants object fails, an object that dies loses only what finished since its last try.
 */
const USAGE_FLUSH_MS = 1000;
/** After a batch that did not arrive, the next try. */
const USAGE_RETRY_MS = 5000;

/** What a routing object needs of its environment: the tenants object for usage, and the bindings deployments name (probes). */
interface GroupEnv {
  TENANTS?: DurableObjectNamespace<TenantsRpc & Rpc.DurableObjectBranded>;
  /** Read only for the names of the gateway's keys, which no probe carries. */
  KVGATE_CONFIG?: unknown;
  [name: string]: unknown;
}

/**
 * What a Worker of an earlier gateway gets (its calls named the group, and backends by position):
 * an error, before anything changes, which it answers as routing unavailable.
 */
const OTHER_PROTOCOL = "kvgate: a call of another routing protocol (an older gateway deployed beside this one)";

interface SavedView {
  group: ResolvedGroup;
  installedAt: number;
}

/** A part of the saved usage: rows of the batch to send first, under its id, or (batch null) rows waiting behind it. */
interface SavedUsagePart {
  batch: string | null;
  rows: UsageRow[];
}

/**
 * One object per model group (its name is the group's), or per shard of a sharded group (each
 * owning a slice of its backends: src/sharding/): it decides and it counts, and is never in
 * the data path. The routing itself is src/routing/group-router.ts; this shell binds it to
 * storage and to the alarm, which reclaims leases no Worker renews, sends health probes to open
 * and half-open backends, and saves the affinity snapshot. It reads no config of its own (but
 * the names of the gateway's keys, which no probe carries): its callers bring their version's,
 * and it keeps what it was given, so an alarm after an eviction knows what to probe. Writes are
 * batched: a breaker when it changes state, affinity at most once per snapshotIntervalMs, until
 * when its leases may run at most once per leaseTtlMs / 2 (LIVE_UNTIL), keys' usage only while the
 * tenants object fails to take it — never one per request.
 */
export class ModelGroup extends DurableObject<GroupEnv> implements ModelGroupRpc {
  private readonly router: GroupRouter;
  private alarmAt: number | null = null;
  /** When the usage waiting in memory goes to the tenants object; null while none waits. */
  private usageDueAt: number | null = null;
  private readonly calls = { route: 0, release: 0 };
  private readonly restored = { breakers: 0, affinityBlocks: 0 };
  private snapshotAt = 0;
  /** The config's names for the gateway's keys, read at the first probe. */
  private gatewayKeys: GatewayKeys | null = null;
  /** How many parts of saved usage storage holds (USAGE); 0 while none is saved, as when every send arrives. */
  private usageParts = 0;
  /** Retired, it keeps its versions (VIEW) until nothing runs there: forgetRouting. */
  private viewsKept = false;
  /** What LIVE_UNTIL holds (or, restarted from an object that saved none, is taken to); null while it holds nothing. */
  private liveUntil: number | null = null;

  constructor(ctx: DurableObjectState, env: GroupEnv) {
    super(ctx, env);
    // A shard's object routes for its group: the group's name is what its series and events carry.
    this.router = new GroupRouter(shardOfObject(ctx.id.name ?? ctx.id.toString()).group);
    void ctx.blockConcurrencyWhile(() => this.restore());
  }

  /**
   * Processes the leases that rode along, then picks a backend of the caller's version and takes
   * its slot. A version it does not know, with no group attached, is refused (the leases are
   * processed all the same): the Worker sends the call again with its group.
   */
  route(call: RouteCall): RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal {
    if (typeof call !== "object" || call === null) throw new TypeError(OTHER_PROTOCOL);
    this.calls.route++;
    const now = Date.now();
    const r = this.router;
    for (const x of call.released) r.release(x, now);
    if (call.group) this.learn(call.group, now);
    for (const x of call.renewed) r.renew(x, now);
    const decision = r.route(call.version, call.chain, call.exclude, now, call.tenant, call.failover === true, call.blocks, call.spill, call.passedOn === true, call.othersLeft === true, Array.isArray(call.unreachable) ? call.unreachable : undefined, call.media === true, call.unreachableCounted === true, call.partial === true);
    this.afterChange();
    return decision;
  }

  /**
   * Processes finished and held leases; answers which renewals found their key's budget spent, or
   * its tpm reached (their holder ends them) and which leases it does not hold (nothing they carried was charged),
   * and its incarnation, for a Worker whose only calls are these to tell it restarted.
   */
  release(released: LeaseRelease[], renewed: LeaseRenewal[]): RenewalAnswers {
    if (!Array.isArray(released) || !Array.isArray(renewed)) throw new TypeError(OTHER_PROTOCOL);
    this.calls.release++;
    const now = Date.now();
    for (const x of released) this.router.release(x, now);
    const answers: Required<RenewalAnswers> = { spent: [], overTpm: [], unheld: [], incarnation: this.router.incarnation };
    for (const x of renewed) {
      const outcome = this.router.renew(x, now);
      if (outcome !== "held") answers[outcome].push(x.lease);
    }
    this.afterChange();
    return answers;
  }

  install(group: ResolvedGroup): void {
    if (typeof group !== "object" || group === null || typeof group.version !== "string") throw new TypeError(OTHER_PROTOCOL);
    this.learn(group, Date.now());
    this.afterChange();
  }

  async retire(rev: number): Promise<void> {
    if (typeof rev !== "number") throw new TypeError(OTHER_PROTOCOL);
    this.router.retire(rev);
    void this.ctx.storage.put(RETIRED, rev);
    if (this.router.retired) await this.forgetRouting(true);
    this.afterChange();
  }

  status(fleet?: GroupIds): GroupStatus {
    // Counts as they stand: expiry is the alarm's and the route call's job, so a test can see it happen.
    const r = this.router;
    checkFleet(fleet);
    const known = r.inFlightKnown(Date.now());
    return {
      group: r.name,
      strategy: r.newest?.strategy ?? "",
      versions: r.versions(),
      rev: r.rev,
      leases: r.leaseCount,
      calls: { ...this.calls },
      tenants: { keys: r.ledger.size, pendingUsageRows: r.ledger.pendingRows },
      restored: { ...this.restored, leases: r.adopted },
      backends: r.snapshot(fleet),
      ...(known ? {} : { inFlightKnown: false as const }),
    };
  }

  metrics(fleet?: GroupIds): GroupMetrics {
    checkFleet(fleet);
    // Its keys as columns: their clone is the answer's cost, paid on the thread route calls wait for.
    return packKeys(this.router.metrics(fleet));
  }

  handOver(): GroupMetrics | null {
    return this.router.handOver(Date.now());
  }

  adopt(handed: HandedOver[]): void {
    if (!Array.isArray(handed) || !handed.every((h) => typeof h?.object === "string" && typeof h.metrics === "object" && h.metrics !== null && Array.isArray(h.metrics.backends))) throw new TypeError(OTHER_PROTOCOL);
    this.router.adopt(handed);
  }

  decisions(): DecisionView[] {
    return this.router.decisions.list();
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    const r = this.router;
    const now = Date.now();
    r.expire(now);
    r.dropIdleViews(now);
    const probes = r.dueProbes(now);
    if (probes.length > 0) {
      const results = await Promise.all(probes.map((p) => probe(p.url, p.timeoutMs, this.probeReach(p.key))));
      const at = Date.now();
      probes.forEach((p, i) => r.probed(p.key, results[i] as boolean, at));
    }
    const g = r.newest;
    if (g && r.affinityPending && !r.retired && Date.now() - this.snapshotAt >= g.snapshotIntervalMs) this.saveAffinity();
    r.ledger.sweep(now);
    if (this.usageDueAt !== null && now >= this.usageDueAt) await this.sendUsage();
    this.afterChange();
  }

  /**
   * One batch of the virtual keys' usage to the tenants object, which answers their spend. A send
   * that fails saves what is not delivered; while that is saved, each send's end saves it again or
   * deletes it, so a restart neither sends again what arrived nor loses what did not. Nothing is
   * written while none is saved: not on the way of a send that arrives.
   */
  private async sendUsage(): Promise<void> {
    this.usageDueAt = null;
    const ledger = this.router.ledger;
    const batch = ledger.takeBatch();
    if (!batch) return;
    try {
      const tenants = this.env.TENANTS;
      if (!tenants) throw new Error("the gateway has no TENANTS binding");
      // The tenants object knows a batch sent again (after a restart) by its sender and id: the
      // sender is the object's id, the same in every incarnation, where its name may be unknown
      // to one its alarm woke after an eviction (cloudflare/workerd#6850).
      ledger.sent(await tenants.getByName(TENANTS_NAME).record(batch.rows, batch.keys, { from: this.ctx.id.toString(), id: batch.id }));
    } catch (e) {
      ledger.unsent();
      this.saveUsage();
      this.usageDueAt = Date.now() + USAGE_RETRY_MS;
      console.error(`kvgate: sending ${batch.rows.length} usage row(s) of ${this.router.name} to the tenants object failed: ${(e as Error).message}`);
      return;
    }
    if (this.usageParts === 0) return;
    if (!ledger.cutOwed()) {
      this.deleteKeys(this.usagePartKeys(0, this.usageParts));
      this.usageParts = 0;
      return;
    }
    this.saveUsage();
    // What waited through an outage goes batch after batch, not one a second.
    this.usageDueAt = Date.now();
  }

  /**
   * Saves what is not delivered in place of the copy saved before, deleting the parts it no longer
   * uses: bounded as the ledger is (one batch, and a row per key, day, model and backend), however
   * long the outage. Its writes are issued with no await between them, so they commit as one, and
   * the next send waits until they have.
   */
  private saveUsage(): void {
    const unsent = this.router.ledger.unsentToSave();
    if (!unsent) return;
    const parts: SavedUsagePart[] = [];
    for (const [id, rows] of [[unsent.batch.id, unsent.batch.rows], [null, unsent.pending]] as const) {
      for (let i = 0; i < rows.length; i += USAGE_ROWS_PER_VALUE) parts.push({ batch: id, rows: rows.slice(i, i + USAGE_ROWS_PER_VALUE) });
    }
    const keys = this.usagePartKeys(0, parts.length);
    this.putAll(parts.map((part, i) => [keys[i] as string, part]));
    this.deleteKeys(this.usagePartKeys(parts.length, this.usageParts));
    this.usageParts = parts.length;
  }

  /** The storage keys of saved usage's parts `from` to `to` (excluded). */
  private usagePartKeys(from: number, to: number): string[] {
    const keys: string[] = [];
    for (let i = from; i < to; i++) keys.push(USAGE + String(i).padStart(6, "0"));
    return keys;
  }

  /** The usage an earlier incarnation saved and did not see delivered: sent before anything that finishes here. */
  private async restoreUsage(now: number): Promise<void> {
    const parts = await this.ctx.storage.list<SavedUsagePart>({ prefix: USAGE });
    // Its parts are numbered from 0 without a gap: every save writes them all at once.
    this.usageParts = parts.size;
    const first = parts.values().next().value;
    if (!first?.batch) return;
    const saved: UnsentUsage = { batch: { id: first.batch, rows: [] }, pending: [] };
    for (const part of parts.values()) (part.batch === null ? saved.pending : saved.batch.rows).push(...part.rows);
    this.router.ledger.restoreUnsent(saved, now);
  }

  /** A probe goes the way requests go: through the deployment's binding, with its headers and its API key (the newest version's). */
  private probeReach(key: string): UpstreamReach {
    const d = this.router.newest?.deployments.find((x) => backendKey(x.id, x.baseUrl) === key);
    // The versions it keeps came from Workers and storage: their deployments are held to the gateway's keys here too.
    return d ? reachOf(d, this.env, (this.gatewayKeys ??= gatewayKeysOf(this.env.KVGATE_CONFIG))) : PUBLIC_REACH;
  }

  /** A version a caller brought, or the registry pushed; one known already may come at a later revision. */
  private learn(group: ResolvedGroup, now: number): void {
    const known = this.router.knows(group.version);
    const rev = this.router.rev;
    this.router.install(group, now);
    // A version of a group the registry removed (a Worker that has not heard yet) takes no request: nothing to keep.
    if ((known && group.rev <= rev) || this.router.retired) return;
    const saved: SavedView = { group, installedAt: now };
    // With the first version, that no lease is out: a restart of an object never called is known at once.
    const entries: Record<string, unknown> = { [VIEW + group.version]: saved };
    if (this.liveUntil === null) entries[LIVE_UNTIL] = this.liveUntil = 0;
    void this.ctx.storage.put(entries);
  }

  /** What an earlier incarnation saved: the versions first (they say which servers exist), then each server's state. */
  private async restore(): Promise<void> {
    const storage = this.ctx.storage;
    const views = [...(await storage.list<SavedView>({ prefix: VIEW })).values()].sort((a, b) => a.installedAt - b.installedAt);
    const now = Date.now();
    for (const v of views) this.router.install(v.group, now);
    const liveUntil = await storage.get<number>(LIVE_UNTIL);
    if (views.length > 0) {
      this.router.restarted(now, liveUntil);
      this.liveUntil = liveUntil ?? this.router.inFlightKnownAt;
    }
    // A retired group's object still owes the tenants object its keys' usage.
    await this.restoreUsage(now);
    const retired = await storage.get<number>(RETIRED);
    if (retired !== undefined) this.router.retire(retired);
    // One retired by a release that kept its state: it goes now.
    if (this.router.retired) {
      await this.forgetRouting(views.length > 0);
      this.afterChange();
      return;
    }
    const stale: string[] = [];
    for (const [key, saved] of await storage.list<SavedBreaker>({ prefix: BREAKER })) {
      if (!this.router.restoreBreaker(saved)) stale.push(key);
      else if (saved.state !== "closed") this.restored.breakers++;
    }
    for (const [key, blocks] of await storage.list<Float64Array>({ prefix: AFFINITY })) {
      const loaded = this.router.restoreAffinity(key.slice(AFFINITY.length), blocks);
      if (loaded === null) stale.push(key);
      else this.restored.affinityBlocks += loaded;
    }
    this.deleteKeys(stale);
    this.afterChange();
  }

  private afterChange(): void {
    const r = this.router;
    const now = Date.now();
    const until = r.leasesRunUntil(this.liveUntil ?? 0, now);
    if (until !== null) this.saveLiveUntil(until);
    if (this.usageDueAt === null && r.ledger.pendingRows > 0) this.usageDueAt = Date.now() + USAGE_FLUSH_MS;
    const breakers = r.takeBreakerChanges();
    if (breakers.length > 0 && !r.retired) this.putAll(breakers.map(({ key, saved }) => [BREAKER + key, saved]));
    for (const { backend, from, saved } of breakers) {
      if (from !== saved.state) logEvent("breaker", saved.state === "open" ? "warn" : "info", { group: r.name, backend, from, to: saved.state });
    }
    const dropped = r.takeDropped();
    if (dropped.versions.length + dropped.backends.length > 0) {
      this.deleteKeys([...dropped.versions.map((v) => VIEW + v), ...dropped.backends.flatMap((k) => [BREAKER + k, AFFINITY + k])]);
    }
    if (this.viewsKept && r.doneServing(now)) {
      this.viewsKept = false;
      this.liveUntil = null;
      this.deleteKeys([LIVE_UNTIL]);
      void this.forget([VIEW]);
    }
    this.arm();
  }

  /**
   * Deletes what the object saved to route its group (breakers, prefix sets; versions once nothing
   * runs there): the registry removed the group, and an object stores for as long as it has data,
   * so every group or shard an operator ever removed kept up to 64 KiB a backend for good. Only
   * RETIRED stays: it keeps the object from taking requests for a Worker that has not heard of the
   * removal yet; and usage not yet delivered (USAGE), until it is. `viewsSaved`: the versions stay
   * (viewsKept) while requests may run there: after a restart, a lease's renewal is taken back on
   * the server its version names, and the object hands its counts over only once it holds none.
   */
  private async forgetRouting(viewsSaved: boolean): Promise<void> {
    this.viewsKept = viewsSaved;
    await this.forget([BREAKER, AFFINITY]);
  }

  private async forget(prefixes: string[]): Promise<void> {
    const keys: string[] = [];
    for (const prefix of prefixes) keys.push(...(await this.ctx.storage.list({ prefix })).keys());
    this.deleteKeys(keys);
  }

  private saveAffinity(): void {
    this.snapshotAt = Date.now();
    this.putAll(this.router.takeAffinityChanges(SNAPSHOT_BLOCKS).map(({ key, blocks }) => [AFFINITY + key, blocks]));
  }

  /**
   * At most once per leaseTtlMs / 2 while leases are given (leasesRunUntil). Not when a status read
   * finds none left: with a dashboard reading every second, each next request of a quiet group
   * would write again (a write per request, its answer held until it is stored).
   */
  private saveLiveUntil(at: number): void {
    this.liveUntil = at;
    void this.ctx.storage.put(LIVE_UNTIL, at);
  }

  private putAll(entries: [string, unknown][]): void {
    for (let i = 0; i < entries.length; i += KEYS_PER_CALL) void this.ctx.storage.put(Object.fromEntries(entries.slice(i, i + KEYS_PER_CALL)));
  }

  private deleteKeys(keys: string[]): void {
    for (let i = 0; i < keys.length; i += KEYS_PER_CALL) void this.ctx.storage.delete(keys.slice(i, i + KEYS_PER_CALL));
  }

  /**
   * Sets the alarm for the object's next own work, only when that is earlier than the alarm
   * already set: leases expire in the order they were taken, so on the request path this is a
   * comparison, not a storage write.
   */
  private arm(): void {
    const r = this.router;
    let at = r.nextWake();
    if (this.usageDueAt !== null && (at === null || this.usageDueAt < at)) at = this.usageDueAt;
    // Versions kept after a restart are let go once it knows nothing runs there, though no call comes.
    const known = r.inFlightKnownAt;
    if (this.viewsKept && known > Date.now() && (at === null || known < at)) at = known;
    const g = r.newest;
    // A retired group's prefix sets are not saved: it takes no request they could place.
    if (r.affinityPending && r.retired) r.affinityPending = false;
    if (g && r.affinityPending) {
      const snapshotDue = this.snapshotAt + g.snapshotIntervalMs;
      if (at === null || snapshotDue < at) at = snapshotDue;
    }
    if (at === null) return;
    const now = Date.now();
    // The runtime keeps whole milliseconds and drops the fraction: an alarm set for a fractional
    // due time would fire before it, find nothing due, and be set again for the same instant.
    at = Math.max(Math.ceil(at), now);
    // An alarm already set for earlier will come and set the next one. One that should have
    // fired by now proves nothing (it may never come): it is set again.
    if (this.alarmAt !== null && this.alarmAt > now && this.alarmAt <= at) return;
    this.alarmAt = at;
    void this.ctx.storage.setAlarm(at);
  }
}

/** A status or metrics call's group (GroupIds), if it brings one, in the shape this protocol gives it. */
function checkFleet(fleet: GroupIds | undefined): void {
  if (fleet !== undefined && (typeof fleet !== "object" || fleet === null || typeof fleet.rev !== "number" || !Array.isArray(fleet.ids))) throw new TypeError(OTHER_PROTOCOL);
}

/** A health probe: a 2xx within the timeout is healthy. A redirect is not followed, and is no answer. */
async function probe(url: string, timeoutMs: number, reach: UpstreamReach): Promise<boolean> {
  if (!reach.ok) return false;
  try {
    const res = await fetchDeployment(reach, url, { method: "GET", headers: {}, redirect: "manual", signal: AbortSignal.timeout(timeoutMs) });
    await res.body?.cancel();
    return res.ok;
  } catch {
    return false;
  }
}
