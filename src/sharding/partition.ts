import type { ResolvedGroup } from "../config/load.ts";
import { fmix32 } from "../prefix/block-hasher.ts";

/**
 * A group of `shards` > 1 routes through that many Durable Objects, each owning a slice of the
 * group's deployments. Shard 0's object keeps the group's own name (a group that starts sharding
 * keeps its first object's state); shard i's name adds a control character no group name may hold
 * (src/control-characters.ts), so it never names another group's object.
 */
const SHARD_MARK = "\u001f";

export function shardObjectName(group: string, shard: number): string {
  return shard === 0 ? group : `${group}${SHARD_MARK}${shard}`;
}

/** Every object of a group of `shards` (a record the registry saved before groups had shards has none: one). */
export function objectNamesOf(group: string, shards: number | undefined): string[] {
  const n = shards !== undefined && shards > 1 ? shards : 1;
  return Array.from({ length: n }, (_, i) => shardObjectName(group, i));
}

/**
 * Every routing object that may hold requests or counts of a group: its shards', and those of the
 * shards it gave up (`objects`: how many it has had, when more than its shards give it — GroupRecord.objects).
 */
export function routingObjectNames(group: string, shards: number | undefined, objects: number | undefined): string[] {
  return objectNamesOf(group, Math.max(shards ?? 1, objects ?? 1));
}

/** The group and shard an object's name stands for. */
export function shardOfObject(objectName: string): { group: string; shard: number } {
  const at = objectName.lastIndexOf(SHARD_MARK);
  if (at < 0) return { group: objectName, shard: 0 };
  return { group: objectName.slice(0, at), shard: Number(objectName.slice(at + 1)) };
}

/**
 * Which shard owns each deployment: rendezvous hashing (each id ranks the shards by a hash of
 * the pair and takes the first with room), ids placed in the order of their own hash, with room
 * for ⌊deployments / shards⌋ each and one more in as many shards as the division leaves over.
 * The room keeps the slices even — plain rendezvous hashing would often leave a shard of a small
 * fleet empty; the ranking keeps them stable — a server that joins or leaves moves few others, so
 * few lose the prefix state their shard holds of them. Depends only on the set of ids, not on
 * their order in the config.
 */
export function partition(ids: readonly string[], shards: number): number[] {
  const owner = new Array<number>(ids.length).fill(0);
  if (shards <= 1) return owner;
  const even = Math.floor(ids.length / shards);
  let largerLeft = ids.length % shards;
  const taken = new Array<number>(shards).fill(0);
  const hashes = ids.map(hash32);
  const order = ids.map((_, i) => i).sort((a, b) => (hashes[a] as number) - (hashes[b] as number) || ((ids[a] as string) < (ids[b] as string) ? -1 : 1));
  for (const i of order) {
    const h = hashes[i] as number;
    let best = -1;
    let bestScore = -1;
    for (let s = 0; s < shards; s++) {
      const n = taken[s] as number;
      if (n > even || (n === even && largerLeft === 0)) continue;
      const score = fmix32(h ^ Math.imul(s + 1, 0x9e3779b1));
      if (score > bestScore) {
        best = s;
        bestScore = score;
      }
    }
    owner[i] = best;
    taken[best] = (taken[best] as number) + 1;
    if (taken[best] === even + 1) largerLeft--;
  }
  return owner;
}

/** FNV-1a over the id's UTF-16 code units, finalised: a stable 32-bit hash of a deployment id. */
function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return fmix32(h);
}

/** A group's shards as the Worker and the fleet registry see them: one object each, and the config each routes with. */
export interface GroupShards {
  readonly count: number;
  readonly objectNames: readonly string[];
  /** Shard i's config: the group's, with only the deployments it owns. Same version: each object only ever sees its own slice. */
  readonly views: readonly ResolvedGroup[];
  /** Each shard's active weight: what its in-flight count is measured against. 0 for a shard with nothing to take requests. */
  readonly weights: readonly number[];
  /** Shards of weight above 0: what a prefix's share of the requests is weighed against. */
  readonly active: number;
}

const cache = new WeakMap<ResolvedGroup, GroupShards>();

/** Computed once per version of the group this isolate loaded. */
export function groupShards(group: ResolvedGroup): GroupShards {
  let s = cache.get(group);
  if (s) return s;
  const objectNames = objectNamesOf(group.name, group.shards);
  const count = objectNames.length;
  const owner = partition(
    group.deployments.map((d) => d.id),
    count,
  );
  const views: ResolvedGroup[] = [];
  const weights: number[] = [];
  for (let i = 0; i < count; i++) {
    const mine = group.deployments.filter((_, k) => owner[k] === i);
    views.push(count === 1 ? group : { ...group, deployments: mine });
    weights.push(mine.reduce((w, d) => w + (d.state === "active" ? d.weight : 0), 0));
  }
  s = { count, objectNames, views, weights, active: weights.filter((w) => w > 0).length };
  cache.set(group, s);
  return s;
}
