import type { ResolvedGroup } from "../../src/config/load.ts";
import { groupShards } from "../../src/sharding/partition.ts";
import type { Env } from "../env.ts";

/**
 * A stub of one of the group's Durable Objects (the group's own, or a shard's). Its locationHint
 * places the object where it is first created — near the group's GPUs, so a route call is a short
 * hop from where the Worker that fetches from them runs; for an object that exists already the
 * runtime ignores it.
 */
export function groupObject(env: Env, object: string, locationHint?: ResolvedGroup["locationHint"]) {
  return locationHint ? env.MODEL_GROUP.getByName(object, { locationHint }) : env.MODEL_GROUP.getByName(object);
}

/** A stub of each of the group's objects: one, or one per shard. */
export function groupObjects(env: Env, group: ResolvedGroup) {
  return groupShards(group).objectNames.map((name) => groupObject(env, name, group.locationHint));
}
