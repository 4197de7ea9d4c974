import { DurableObject } from "cloudflare:workers";
import type { GroupStatus } from "../src/routing/protocol.ts";
import { GroupRouter, type LeaseRelease, type RouteDecision, type RouteRefusal, type SavedBreaker } from "../src/routing/group-router.ts";
import { loadConfig } from "../workers/config.ts";
import type { Env } from "../workers/env.ts";


type SavedBreakers = SavedBreaker[];
type SavedAffinity = { id: string; blocks: Float64Array }[];

/** Blocks per backend kept in the affinity snapshot: 32 KiB each, the recent working set. */
const SNAPSHOT_BLOCKS = 4096;
const KEY_BREAKERS = "breakers";
const KEY_AFFINITY = "affinity";
const KEY_GROUP = "group";

/**
 * One object per model group: it decides and it counts, and is never in the data path.
 * The routing itself is src/routing/group-router.ts; this shell binds it to storage and to the
 * alarm, which reclaims leases a killed Worker never released, sends health probes to open and
 * half-open backends, and saves the affinity snapshot. Writes are batched: breakers when one
 * changes state, affinity at most once per snapshotIntervalMs — never one per request.
 */
export class ModelGroup extends DurableObject<Env> {
  private router: GroupRouter | null = null;
  private alarmAt: number | null = null;
  private readonly calls = { route: 0, release: 0 };
  private saved: { breakers: SavedBreakers | undefined; affinity: SavedAffinity | undefined } = { breakers: undefined, affinity: undefined };
  /** The group this object serves, as saved: an alarm after an eviction needs it before any call. */
  private savedGroup: string | undefined;
  private restored = { breakers: 0, affinityBlocks: 0 };
  private savedBreakerVersion = 0;
  private routedSinceSnapshot = 0;
  private snapshotAt = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      const found = await ctx.storage.get<SavedBreakers | SavedAffinity | string>([KEY_BREAKERS, KEY_AFFINITY, KEY_GROUP]);
      this.saved = { breakers: found.get(KEY_BREAKERS) as SavedBreakers | undefined, affinity: found.get(KEY_AFFINITY) as SavedAffinity | undefined };
      this.savedGroup = found.get(KEY_GROUP) as string | undefined;
    });
  }

  private routerFor(group: string): GroupRouter {
    if (this.router) return this.router;
    const loaded = loadConfig(this.env);
    if (!loaded.ok) throw new Error(loaded.error);
    const g = loaded.config.groups.find((x) => x.name === group);
    if (!g) throw new Error(`no model group "${group}"`);
    // Once per object: an alarm after an eviction rebuilds the router from it.
    if (this.savedGroup !== group) void this.ctx.storage.put(KEY_GROUP, group);
    this.savedGroup = group;
    const router = new GroupRouter(g);
    const { breakers, affinity } = this.saved;
    if (breakers) this.restored.breakers = router.restoreBreakers(breakers);
    if (affinity) {
      router.restoreAffinity(affinity);
      this.restored.affinityBlocks = affinity.reduce((n, a) => n + a.blocks.length, 0);
    }
    this.saved = { breakers: undefined, affinity: undefined };
    this.savedBreakerVersion = router.breakerVersion;
    this.router = router;
    if (this.restored.breakers > 0) this.arm(router);
    return router;
  }

  /**
   * Releases the leases that rode along, then picks a backend and takes its slot.
   * `exclude`: backends this request already failed on (a failover attempt).
   */
  route(group: string, chain: number[], released: LeaseRelease[], exclude: number[] = []): RouteDecision | RouteRefusal {
    this.calls.route++;
    const router = this.routerFor(group);
    const now = Date.now();
    for (const r of released) router.release(r, now);
    const decision = router.route(chain, now, exclude);
    this.routedSinceSnapshot++;
    this.afterChange(router);
    return decision;
  }

  release(group: string, released: LeaseRelease[]): void {
    this.calls.release++;
    const router = this.routerFor(group);
    const now = Date.now();
    for (const r of released) router.release(r, now);
    this.afterChange(router);
  }

  status(group: string): GroupStatus {
    // Counts as they stand: expiry is the alarm's and the route call's job, so a test can see it happen.
    const router = this.routerFor(group);
    return {
      group: router.group.name,
      strategy: router.group.strategy,
      leases: router.leaseCount,
      calls: { ...this.calls },
      restored: { ...this.restored },
      backends: router.snapshot(),
    };
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    let router = this.router;
    if (!router && this.savedGroup) {
      try {
        router = this.routerFor(this.savedGroup);
      } catch (e) {
        // The group left the config: nothing of it is left to probe or reclaim.
        console.error(`kvgate: alarm for group "${this.savedGroup}": ${(e as Error).message}`);
        return;
      }
    }
    if (!router) return;
    const now = Date.now();
    router.expire(now);
    const probes = router.dueProbes(now);
    if (probes.length > 0) {
      const timeoutMs = router.group.breaker.probeTimeoutMs;
      const results = await Promise.all(probes.map((p) => probe(p.url, timeoutMs)));
      const at = Date.now();
      probes.forEach((p, i) => router.probed(p.backend, results[i] as boolean, at));
    }
    if (this.routedSinceSnapshot > 0 && Date.now() - this.snapshotAt >= router.group.snapshotIntervalMs) this.saveAffinity(router);
    this.afterChange(router);
  }

  private afterChange(router: GroupRouter): void {
    if (router.breakerVersion !== this.savedBreakerVersion) {
      this.savedBreakerVersion = router.breakerVersion;
      void this.ctx.storage.put(KEY_BREAKERS, router.breakerStates());
    }
    this.arm(router);
  }

  private saveAffinity(router: GroupRouter): void {
    this.routedSinceSnapshot = 0;
    this.snapshotAt = Date.now();
    void this.ctx.storage.put(KEY_AFFINITY, router.exportAffinity(SNAPSHOT_BLOCKS));
  }

  /**
   * Sets the alarm for the object's next own work, only when that is earlier than the alarm
   * already set: leases expire in the order they were taken, so on the request path this is a
   * comparison, not a storage write.
   */
  private arm(router: GroupRouter): void {
    let at = router.nextWake();
    if (this.routedSinceSnapshot > 0) {
      const snapshotDue = Math.max(this.snapshotAt + router.group.snapshotIntervalMs, Date.now());
      if (at === null || snapshotDue < at) at = snapshotDue;
    }
    if (at === null) return;
    // A probe due already (a restored open breaker) is due now, not in the past.
    at = Math.max(at, Date.now());
    if (this.alarmAt !== null && this.alarmAt <= at) return;
    this.alarmAt = at;
    void this.ctx.storage.setAlarm(at);
  }
}

/** A health probe: any 2xx within the timeout is healthy. */
async function probe(url: string, timeoutMs: number): Promise<boolean> {
  try {
    const res = await fetch(url, { method: "GET", signal: AbortSignal.timeout(timeoutMs) });
    await res.body?.cancel();
    return res.ok;
  } catch {
    return false;
  }
}
