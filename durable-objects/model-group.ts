import { DurableObject } from "cloudflare:workers";
import { GroupRouter, type BackendSnapshot, type LeaseRelease, type RouteDecision } from "../src/routing/group-router.ts";
import { loadConfig } from "../workers/config.ts";
import type { Env } from "../workers/env.ts";

export interface GroupStatus {
  group: string;
  strategy: string;
  leases: number;
  /** RPCs this object served since it started: what benchmarks divide by requests. */
  calls: { route: number; release: number };
  backends: BackendSnapshot[];
}

/**
 * One object per model group: it decides and it counts, and is never in the data path.
 * The routing itself is src/routing/group-router.ts; this shell binds it to the alarm that
 * reclaims leases a killed Worker never released.
 */
export class ModelGroup extends DurableObject<Env> {
  private router: GroupRouter | null = null;
  private groupName = "";
  private alarmAt: number | null = null;
  private readonly calls = { route: 0, release: 0 };

  private routerFor(group: string): GroupRouter {
    if (this.router) return this.router;
    const loaded = loadConfig(this.env);
    if (!loaded.ok) throw new Error(loaded.error);
    const g = loaded.config.groups.find((x) => x.name === group);
    if (!g) throw new Error(`no model group "${group}"`);
    this.groupName = group;
    this.router = new GroupRouter(g);
    return this.router;
  }

  /** Releases the leases that rode along, then picks a backend and takes its slot. */
  route(group: string, chain: number[], released: LeaseRelease[]): RouteDecision | null {
    this.calls.route++;
    const router = this.routerFor(group);
    for (const r of released) router.release(r);
    const decision = router.route(chain, Date.now());
    if (decision && this.alarmAt === null) this.scheduleExpiry(router);
    return decision;
  }

  release(group: string, released: LeaseRelease[]): void {
    this.calls.release++;
    const router = this.routerFor(group);
    for (const r of released) router.release(r);
  }

  status(group: string): GroupStatus {
    // Counts as they stand: expiry is the alarm's and the route call's job, so a test can see it happen.
    const router = this.routerFor(group);
    return { group: this.groupName, strategy: this.routerStrategy(), leases: router.leaseCount, calls: { ...this.calls }, backends: router.snapshot() };
  }

  override async alarm(): Promise<void> {
    this.alarmAt = null;
    if (!this.router) return;
    this.router.expire(Date.now());
    this.scheduleExpiry(this.router);
  }

  private routerStrategy(): string {
    const loaded = loadConfig(this.env);
    return loaded.ok ? (loaded.config.byModel.get(this.groupName)?.strategy ?? "") : "";
  }

  // Leases expire in the order they were taken, so the earliest expiry only moves later: one
  // alarm write per lease lifetime, not one per request.
  private scheduleExpiry(router: GroupRouter): void {
    const at = router.nextExpiry;
    if (at === null) return;
    this.alarmAt = at;
    void this.ctx.storage.setAlarm(at);
  }
}
