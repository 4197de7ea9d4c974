import type { ResolvedGroup } from "../config/load.ts";
import { groupShards, type GroupShards } from "./partition.ts";
import { boundedOrder, shardOrder } from "./shard-order.ts";
import { ShardKeys } from "./shard-key.ts";

/** How long an object's count of other isolates' requests stands for its load: about a request's life. */
const OTHERS_FRESH_MS = 1000;

interface ShardLoad {
  /** This isolate's calls under way to the object and leases it holds there. */
  own: number;
  /** Other isolates' requests there, as of the object's last answer to this isolate. */
  others: number;
  at: number;
}

/**
 * An isolate's side of a sharded group: which shard a prompt goes to, and in what order the
 * others are tried when that one refuses. The key comes from the prompt's prefix (ShardKeys), the
 * order from rendezvous hashing, and bounded loads move a shard too busy for one more request
 * behind the first that is not. A shard's load is this isolate's own requests there, plus the
 * others' as the object counted them in its last answer here (every answer carries its in-flight
 * count) while that answer is fresh: a count kept longer would go stale high after a burst, and a
 * shard passed over for it would never answer again to correct it.
 */
export class ShardChoice {
  private readonly keys = new Map<string, ShardKeys>();
  private readonly loads = new Map<string, ShardLoad>();

  /** The shards of `group` to try for `chain`, best first. */
  order(group: ResolvedGroup, chain: readonly number[], now = Date.now()): { shards: GroupShards; order: number[] } {
    const shards = groupShards(group);
    let keys = this.keys.get(group.name);
    if (!keys) this.keys.set(group.name, (keys = new ShardKeys()));
    const key = keys.keyOf(chain, shards.active);
    const loads = shards.objectNames.map((n) => this.loadOf(n, now));
    // No prompt (embeddings of nothing alike, a realtime session): no cache to aim for, the least busy shard.
    const order = Number.isNaN(key) ? byLoad(loads, shards.weights) : shardOrder(key, shards.weights);
    if (order.length === 0) return { shards, order: [0] };
    return { shards, order: boundedOrder(order, loads, shards.weights, group) };
  }

  /** A route call to `object` is under way. */
  sent(object: string): void {
    this.load(object).own++;
  }

  /** `object` answered with a lease; `inFlight` is its count, that lease included. */
  answered(object: string, inFlight: number, now = Date.now()): void {
    const l = this.load(object);
    l.others = Math.max(0, inFlight - l.own);
    l.at = now;
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

  private load(object: string): ShardLoad {
    let l = this.loads.get(object);
    if (!l) this.loads.set(object, (l = { own: 0, others: 0, at: 0 }));
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
