import { fmix32 } from "../prefix/block-hasher.ts";

const TWO_32 = 2 ** 32;

/**
 * The shards in the order a key prefers them: weighted rendezvous hashing — each shard scores
 * the key by a hash of the pair, scaled by its weight, and the key goes to the highest score,
 * spilling in score order. Every isolate computes the same order, so a key goes to the same shard
 * from every edge location; a shard that comes or goes moves only the keys it owns or will own;
 * each shard's share of keys is its share of the weight (no ring to make uneven); and each key's
 * spill order is its own, so a hot key's overflow spreads rather than landing on one neighbour.
 * Shards of weight 0 (nothing to take requests) are left out.
 */
export function shardOrder(key: number, weights: readonly number[]): number[] {
  const k = fmix32((key % TWO_32) ^ Math.floor(key / TWO_32));
  const order: number[] = [];
  const scores: number[] = [];
  for (let s = 0; s < weights.length; s++) {
    const w = weights[s] as number;
    if (!(w > 0)) continue;
    // A uniform draw in (0, 1) per pair; w / −ln(u) is the score whose maximum falls to each shard in proportion to its weight.
    const u = (fmix32(k ^ Math.imul(s + 1, 0x9e3779b1)) + 0.5) / TWO_32;
    scores[s] = w / -Math.log(u);
    order.push(s);
  }
  return order.sort((a, b) => (scores[b] as number) - (scores[a] as number) || a - b);
}

/** How far above the mean a shard's load may go before a key's next shard takes its requests: the group's balance settings, applied per unit of weight. */
export interface ShardBalance {
  balanceAbs: number;
  balanceRel: number;
}

/**
 * Bounded loads: `order`, changed in place, with the first shard not over its bound moved to the
 * front. A shard is over it when one more request would put its in-flight count per unit of
 * weight above both `balanceRel` × and `balanceAbs` + the group's mean — both, as the balance
 * rule between one object's backends reads, so a few conversations hashed unevenly stay where
 * their caches are, while a hot key's load spills to the next shard of its order instead of
 * piling onto one. With weights of at least 1 and a `balanceAbs` of at least 1, some shard is
 * always within it (their loads average the mean plus under one request per unit of weight);
 * when none is, the order stands as it is.
 */
export function boundedOrder(order: number[], inFlight: readonly number[], weights: readonly number[], balance: ShardBalance): number[] {
  let total = 1;
  let weight = 0;
  for (const s of order) {
    total += inFlight[s] as number;
    weight += weights[s] as number;
  }
  const mean = total / weight;
  for (let k = 0; k < order.length; k++) {
    const s = order[k] as number;
    const w = weights[s] as number;
    if (w <= 0) continue;
    const load = ((inFlight[s] as number) + 1) / w;
    if (load > balance.balanceRel * mean && load - mean > balance.balanceAbs) continue;
    toFront(order, k);
    return order;
  }
  return order;
}

/** Moves the shard at position `k` of `order` to its front, the others keeping their order. */
export function toFront(order: number[], k: number): void {
  if (k > 0) order.unshift(...order.splice(k, 1));
}
