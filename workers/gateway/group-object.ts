import type { ResolvedGroup } from "../../src/config/load.ts";
import type { Env } from "../env.ts";

/**
 * A stub of the group's Durable Object. Its locationHint places the object where it is first
 * created — near the group's GPUs, so a route call is a short hop from where the Worker that
 * fetches from them runs; for an object that exists already the runtime ignores it.
 */
export function groupObject(env: Env, group: Pick<ResolvedGroup, "name" | "locationHint">) {
  return group.locationHint ? env.MODEL_GROUP.getByName(group.name, { locationHint: group.locationHint }) : env.MODEL_GROUP.getByName(group.name);
}
