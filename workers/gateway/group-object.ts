import type { ResolvedGroup } from "../../src/config/load.ts";
import { objectNamesOf } from "../../src/sharding/partition.ts";
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

type GroupStub = ReturnType<typeof groupObject>;

/** Asks each of the group's objects (its own, or one per shard) at once; fails when any cannot answer. */
export function askEachObject<T>(env: Env, group: Pick<ResolvedGroup, "name" | "shards" | "locationHint">, ask: (object: GroupStub) => Promise<T>): Promise<T[]> {
  return Promise.all(objectNamesOf(group.name, group.shards).map((name) => ask(groupObject(env, name, group.locationHint))));
}
