import type { ResolvedGroup } from "../config/load.ts";
import { groupShards, type GroupShards } from "./partition.ts";
import { boundedOrder, shardOrder } from "./shard-order.ts";
import { ShardKeys } from "./shard-key.ts";

/**
 * An isolate's side of a sharded group: which shard a prompt goes to, and in what order the
 * others are tried when that one refuses. The key comes from the prompt's prefix (ShardKeys), the
 * order from rendezvous hashing, and bounded loads move a shard too busy for one more request
 * behind the first that is not. The loads are the shards' own, as each answered this isolate last (every
 * answer carries its object's in-flight count), plus the calls this isolate has under way.
 */
export class ShardChoice {
  private readonly keys = new Map<string, ShardKeys>();
  private readonly inFlight = new Map<string, number>();

  /** The shards of `group` to try for `chain`, best first. */
  order(group: ResolvedGroup, chain: readonly number[]): { shards: GroupShards; order: number[] } {
    const shards = groupShards(group);
    let keys = this.keys.get(group.name);
    if (!keys) this.keys.set(group.name, (keys = new ShardKeys()));
    const key = keys.keyOf(chain);
    const loads = shards.objectNames.map((n) => this.inFlight.get(n) ?? 0);
    // No prompt (embeddings of nothing alike, a realtime session): no cache to aim for, the least busy shard.
    const order = Number.isNaN(key) ? byLoad(loads, shards.weights) : shardOrder(key, shards.weights);
    if (order.length === 0) return { shards, order: [0] };
    return { shards, order: boundedOrder(order, loads, shards.weights, group) };
  }

  /** A route call to `object` is under way. */
  sent(object: string): void {
    this.inFlight.set(object, (this.inFlight.get(object) ?? 0) + 1);
  }

  /** `object` answered with a lease; `inFlight` is its count, that lease included. */
  answered(object: string, inFlight: number): void {
    this.inFlight.set(object, inFlight);
  }

  /** A call to `object` took no lease (refused, or failed), or a lease of it ended. */
  ended(object: string): void {
    const n = this.inFlight.get(object);
    if (n !== undefined && n > 0) this.inFlight.set(object, n - 1);
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
