import type { ResolvedGroup } from "../../src/config/load.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import type { Rng } from "../../src/routing/policy.ts";
import { isDue, LeaseBook, renewEveryMs } from "../../src/routing/lease-book.ts";
import type { LearnedSnapshot } from "../../src/routing/feedback.ts";
import type { LeaseOutcome, LeaseRelease, RouteDecision, SpillLimit } from "../../src/routing/protocol.ts";
import { groupShards } from "../../src/sharding/partition.ts";
import { ShardChoice } from "../../src/sharding/shard-choice.ts";

/** The Worker's release flush: config releaseFlushMs at its default (bench:routing's gateways keep it). */
const FLUSH_MS = 10;

/** One routing object of the group (the group's, or a shard's), with what the Worker keeps for it. */
interface GroupObject {
  readonly name: string;
  readonly router: GroupRouter;
  flushArmed: boolean;
}

/** A decision, and the object whose lease it is. */
export interface VirtualLease {
  readonly decision: RouteDecision;
  readonly object: GroupObject;
  readonly timer: ReturnType<typeof setInterval>;
}

/**
 * kvgate's routing for one group in one process: its objects' GroupRouter (the Durable Object's
 * routing, as deployed) and the Worker's side of them as workers/gateway/route-client.ts has it —
 * a sharded group's ShardChoice with bounded loads, finished leases riding along with the next
 * route call or flushed after 10 ms, held leases renewed every leaseTtlMs / 3. What it leaves out
 * is what a process cannot stand in for: workerd, the RPC and the network between the Worker, the
 * object and the GPUs (each takes no time here), and other isolates (there is one Worker).
 */
export class VirtualGateway {
  private readonly group: ResolvedGroup;
  private readonly now: () => number;
  private readonly objects: GroupObject[];
  private readonly choice = new ShardChoice();
  /** The Worker's leases with every object: pending releases and held leases, as route-client.ts keeps them. */
  private readonly book = new LeaseBook();

  constructor(group: ResolvedGroup, rng: Rng, now: () => number) {
    this.group = group;
    this.now = now;
    const sharded = group.shards > 1;
    const shards = sharded ? groupShards(group) : null;
    const names = shards ? shards.objectNames : [group.name];
    const views = shards ? shards.views : [group];
    this.objects = names.map((name, s) => {
      const router = new GroupRouter(group.name, rng);
      router.install(views[s] as ResolvedGroup, now());
      return { name, router, flushArmed: false };
    });
  }

  /** Leases the objects count: every one they gave out and were not given back. */
  get leases(): number {
    return this.objects.reduce((n, o) => n + o.router.leaseCount, 0);
  }

  /** Leases the objects took back because no one renewed them: none, while every holder renews. */
  get expired(): number {
    return this.objects.reduce((n, o) => n + o.router.snapshot().reduce((m, b) => m + b.expired, 0), 0);
  }

  /** What each backend learned from the engines (every object's, in its deployments' order). */
  get learned(): LearnedSnapshot[] {
    return this.objects.flatMap((o) => o.router.snapshot().map((b) => b.learned));
  }

  /** A backend for the prompt (its chain, its size in blocks), its slot taken; null when every object refused. */
  route(chain: readonly number[], blocks: number): VirtualLease | null {
    const now = this.now();
    if (!(this.group.shards > 1)) {
      const answer = this.routeOn(this.objects[0] as GroupObject, chain, blocks, now);
      return "refused" in answer ? null : answer;
    }
    const plan = this.choice.order(this.group, chain, now, blocks);
    const { order } = plan;
    for (let k = 0; k < order.length; k++) {
      const s = order[k] as number;
      const object = this.objects[s] as GroupObject;
      this.choice.sent(object.name);
      const answer = this.routeOn(object, chain, blocks, now, k === 0 ? plan.spill : undefined);
      if (!("refused" in answer)) {
        this.choice.answered(object.name, answer.decision, now);
        this.choice.placed(this.group, plan, s);
        return answer;
      }
      this.choice.ended(object.name);
      // Passed on for a shorter wait elsewhere: asked again last, without the limit, as route-client.ts does.
      if (answer.refused === "spill") order.push(s);
    }
    return null;
  }

  /** Ends a lease with its outcome, as the Worker's attempt does when its answer ends. */
  settle(lease: VirtualLease, outcome: LeaseOutcome, end: Pick<LeaseRelease, "ttftMs" | "durationMs" | "usage" | "streamed"> = {}): void {
    const { object, decision } = lease;
    clearInterval(lease.timer);
    this.book.drop(object.name, decision.lease);
    if (this.group.shards > 1) this.choice.ended(object.name);
    this.book.requeue(object.name, [{ lease: decision.lease, outcome, ...end }]);
    if (object.flushArmed) return;
    object.flushArmed = true;
    setTimeout(() => {
      object.flushArmed = false;
      this.flush(object);
    }, FLUSH_MS);
  }

  /** The route call: the releases and due renewals ride along, then the object routes. */
  private routeOn(object: GroupObject, chain: readonly number[], blocks: number, now: number, spill?: SpillLimit): VirtualLease | { refused: string } {
    this.deliver(object, now);
    const answer = object.router.route(this.group.version, chain, [], now, undefined, false, blocks, spill);
    if ("refused" in answer) return answer;
    const everyMs = renewEveryMs(this.group.leaseTtlMs);
    const held = this.book.hold(object.name, { lease: answer.lease, version: this.group.version, backendId: answer.backendId }, everyMs, now);
    const timer = setInterval(() => {
      if (isDue(held, this.now())) this.flush(object);
    }, everyMs);
    return { decision: answer, object, timer };
  }

  private flush(object: GroupObject): void {
    this.deliver(object, this.now());
  }

  /** What waits for `object` — finished leases, renewals due — delivered to it, as a call carries them. */
  private deliver(object: GroupObject, now: number): void {
    for (const r of this.book.takePending(object.name)) object.router.release(r, now);
    for (const h of this.book.takeRenewals(object.name, now)) object.router.renew(h.renewal, now);
  }
}
