import type { ResolvedGroup } from "../config/load.ts";
import type { RouteDecision, SpillLimit } from "../routing/protocol.ts";
import { groupShards, objectNamesOf, type GroupShards } from "./partition.ts";
import { boundedOrder, shardOrder, toFront } from "./shard-order.ts";
import { KeyPlacements, placementBounds } from "./key-placements.ts";
import { ShardKeys, shardKeyBounds } from "./shard-key.ts";

/** How long an object's count of other isolates' requests stands for its load: about a request's life. */
const OTHERS_FRESH_MS = 1000;

interface ShardLoad {
  /** This isolate's calls under way to the object and leases it holds there. */
  own: number;
  /** Other isolates' requests there, as of the object's last answer to this isolate. */
  others: number;
  at: number;
  /** The object's least queue of prompt work as of its last answer here (RouteDecision.waitMs), and what a block of prompt takes there; blockMs 0 until told. */
  waitMs: number;
  blockMs: number;
  waitAt: number;
}

/** Which shards to ask for a prompt, in order; the first with a `spill` limit when another may serve it sooner. */
export interface ShardPlan {
  shards: GroupShards;
  order: number[];
  /** The prompt's shard key (NaN for no prompt), its position, and the shard it is hashed to (-1 for none); the prompt: for `placed`. */
  key: number;
  at: number;
  own: number;
  chain: readonly number[];
  /** RouteCall.spill for the first shard: the wait the Worker expects on the second. */
  spill?: SpillLimit;
}

/**
 * An isolate's side of a sharded group: which shard a prompt goes to, and in what order the
 * others are tried when that one refuses. The key comes from the prompt's prefix (ShardKeys), the
 * order from rendezvous hashing, and bounded loads move a shard too busy for one more request
 * behind the first that is not. A shard's load is this isolate's own requests there, plus the
 * others' as the object counted them in its last answer here (every answer carries its in-flight
 * count) while that answer is fresh: a count kept longer would go stale high after a burst, and a
 * shard passed over for it would never answer again to correct it.
 *
 * In-flight counts do not say how long a prompt would wait: one shard prefilling a 100k-token
 * prompt has as few requests as an idle one. So every answer also carries the shard's least queue
 * of prompt work (RouteDecision.waitMs), which drains here with the clock, and a prompt's shard
 * is asked to pass it on (RouteCall.spill) when it would wait there longer than on the next
 * shard with its whole prompt to prefill — the trade prefix-aware makes between one object's
 * backends, with the key's shard taken to hold the prompt and the next to hold none of it but a
 * prefix busy enough to be spread over every shard (ShardKey.spread: an app's system prompt), and
 * the fleet's least queue added to the next shard's cost as prefix-aware adds it to uncached
 * blocks (an overloaded fleet keeps its cache hits). Counting the system prompt as the next
 * shard's prefill too kept tool loops and conversations home behind a queue: over 4 shards in
 * virtual time, tool-loop TTFT p50 fell by 10–47% once it was not. A prompt that went elsewhere
 * is remembered under its key (`placed`, KeyPlacements): the next prompt that shares more with it
 * than the key goes there first — a conversation's next turn, where its history is. Over
 * 4 shards on the Mooncake trace, in-flight counts alone had TTFT p95 at 2.1 × one object's.
 *
 * What it learns is per group, under bounds for the isolate (SharedBound): an isolate that serves
 * many sharded groups holds no more than one that serves one, and a group that is no longer a
 * sharded group of the fleet is forgotten when the isolate reads the fleet (`keepOnly`).
 */
export class ShardChoice {
  private readonly keyBounds = shardKeyBounds();
  private readonly placementBounds = placementBounds();
  private readonly keys = new Map<string, ShardKeys>();
  private readonly loads = new Map<string, ShardLoad>();
  /** Per group: where the prompts of keys went, for keys whose prompts went elsewhere than their own shard. */
  private readonly placements = new Map<string, KeyPlacements>();

  /**
   * The isolate read the fleet: what it learned of groups that are not sharded groups of it (removed,
   * renamed, down to one shard) is forgotten, and so are the loads of objects no sharded group has.
   */
  keepOnly(groups: readonly ResolvedGroup[]): void {
    const sharded = new Set<string>();
    const objects = new Set<string>();
    for (const g of groups) {
      if (!(g.shards > 1)) continue;
      sharded.add(g.name);
      for (const o of objectNamesOf(g.name, g.shards)) objects.add(o);
    }
    for (const [name, keys] of this.keys) {
      if (sharded.has(name)) continue;
      keys.release();
      this.keys.delete(name);
    }
    for (const [name, placements] of this.placements) {
      if (sharded.has(name)) continue;
      placements.release();
      this.placements.delete(name);
    }
    // A load with calls under way stays for their ends (`ended`).
    for (const [object, load] of this.loads) if (!objects.has(object) && load.own === 0) this.loads.delete(object);
  }

  /** The shards of `group` to try for `chain` (a prompt of `blocks` blocks), best first. */
  order(group: ResolvedGroup, chain: readonly number[], now = Date.now(), blocks = chain.length): ShardPlan {
    const shards = groupShards(group);
    let keys = this.keys.get(group.name);
    if (!keys) this.keys.set(group.name, (keys = new ShardKeys(this.keyBounds)));
    const { key, at, spread } = keys.keyOf(chain, shards.active);
    const loads = shards.objectNames.map((n) => this.loadOf(n, now));
    // No prompt (embeddings of nothing alike, a realtime session): no cache to aim for, the least busy shard.
    if (Number.isNaN(key)) {
      const order = byLoad(loads, shards.weights);
      return { shards, order: order.length === 0 ? [0] : order, key, at, own: -1, chain };
    }
    const order = shardOrder(key, shards.weights);
    if (order.length === 0) return { shards, order: [0], key, at, own: -1, chain };
    const own = order[0] as number;
    const followed = this.placements.get(group.name)?.follow(key, at, chain) ?? -1;
    if (followed >= 0) toFront(order, order.indexOf(followed));
    boundedOrder(order, loads, shards.weights, group);
    const plan: ShardPlan = { shards, order, key, at, own, chain };
    this.spill(plan, blocks, spread, now);
    return plan;
  }

  /**
   * Moves the shard of object `object` to the end of `plan`'s order, and drops the spill limit
   * (the first shard's, weighed against the one after it). A request that failed server-side on
   * a shard's backend asks the others first: a shard's backends all get its key's prompts, so a
   * second failure there is as likely a broken slice of the fleet as a request that breaks every
   * server, and only another shard's answer tells them apart (workers/gateway/held-failure.ts).
   */
  askLast(plan: ShardPlan, object: string): void {
    const k = plan.order.findIndex((s) => plan.shards.objectNames[s] === object);
    if (k < 0 || k === plan.order.length - 1) return;
    plan.order.push(...plan.order.splice(k, 1));
    delete plan.spill;
  }

  /** The request `plan` was made for took a lease on shard `shard`: where the next prompts that share it go first. */
  placed(group: ResolvedGroup, plan: ShardPlan, shard: number): void {
    if (plan.own < 0) return;
    let placements = this.placements.get(group.name);
    if (!placements) {
      if (shard === plan.own) return;
      this.placements.set(group.name, (placements = new KeyPlacements(this.placementBounds)));
    }
    placements.placed(plan.key, plan.at, plan.chain, shard, plan.own);
  }

  /** The second shard: the one a prompt would wait least on without its cache (all but the spread prefix); the first's limit: that wait. */
  private spill(plan: ShardPlan, blocks: number, spreadBlocks: number, now: number): void {
    const { order, shards } = plan;
    const first = order[0] as number;
    const at = this.loads.get(shards.objectNames[first] as string);
    if (!at || at.blockMs === 0 || order.length < 2) return;
    let least = Infinity;
    let next = -1;
    let nextWait = Infinity;
    for (let k = 0; k < order.length; k++) {
      const s = order[k] as number;
      const w = this.waitOf(shards.objectNames[s] as string, now);
      if (w < least) least = w;
      if (k > 0 && (shards.weights[s] as number) > 0 && w < nextWait) {
        next = s;
        nextWait = w;
      }
    }
    if (next < 0) return;
    order.splice(order.indexOf(next), 1);
    order.splice(1, 0, next);
    plan.spill = { overMs: nextWait + (blocks - spreadBlocks) * at.blockMs + least, spreadBlocks };
  }

  /** A route call to `object` is under way. */
  sent(object: string): void {
    this.load(object).own++;
  }

  /** `object` answered with a lease: its count in flight, that lease included, and its least queue of prompt work. */
  answered(object: string, answer: Pick<RouteDecision, "inFlight" | "waitMs" | "blockMs">, now = Date.now()): void {
    const l = this.load(object);
    l.others = Math.max(0, answer.inFlight - l.own);
    l.at = now;
    if (answer.waitMs !== undefined && answer.blockMs !== undefined) {
      l.waitMs = answer.waitMs;
      l.blockMs = answer.blockMs;
      l.waitAt = now;
    }
  }

  /** A call to `object` took no lease (refused, or failed), or a lease of it ended. */
  ended(object: string): void {
    const l = this.loads.get(object);
    if (l && l.own > 0) l.own--;
  }

  private loadOf(object: string, now: number): number {
    const l = this.loads.get(object);
    if (!l) return 0;
    return l.own + (now - l.at < OTHERS_FRESH_MS ? l.others : 0);
  }

  /** Its least queue of prompt work, drained since it was told: ms of prefill. */
  private waitOf(object: string, now: number): number {
    const l = this.loads.get(object);
    return l ? Math.max(0, l.waitMs - (now - l.waitAt)) : 0;
  }

  private load(object: string): ShardLoad {
    let l = this.loads.get(object);
    if (!l) this.loads.set(object, (l = { own: 0, others: 0, at: 0, waitMs: 0, blockMs: 0, waitAt: 0 }));
    return l;
  }
}

/** Shards that take requests, least in flight per unit of weight first. */
function byLoad(loads: readonly number[], weights: readonly number[]): number[] {
  const member: number[] = [];
  weights.forEach((w, s) => {
    if (w > 0) member.push(s);
  });
  return member.sort((a, b) => (loads[a] as number) / (weights[a] as number) - (loads[b] as number) / (weights[b] as number) || a - b);
}
