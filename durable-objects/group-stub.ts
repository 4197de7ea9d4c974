import type { ResolvedGroup } from "../src/config/load.ts";
import type { ModelGroupRpc } from "../src/routing/protocol.ts";

/**
 * A stub of one of a group's routing objects (the group's own, or a shard's), whoever makes it:
 * the Worker's route calls, releases and reads, the fleet registry's pushes. Its locationHint
 * places the object near the group's GPUs, so a route call is a short hop from where the Worker
 * that fetches from them runs. The runtime honours a hint only on the first get() of an object,
 * and any of these may be that one (a new group's objects are made by the registry's push, before
 * any Worker routes to them): each carries it. For an object that exists already it is ignored.
 */
export function groupObject(env: { MODEL_GROUP: DurableObjectNamespace<ModelGroupRpc & Rpc.DurableObjectBranded> }, object: string, locationHint?: ResolvedGroup["locationHint"]) {
  return locationHint ? env.MODEL_GROUP.getByName(object, { locationHint }) : env.MODEL_GROUP.getByName(object);
}
