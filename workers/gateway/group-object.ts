import type { ResolvedGroup } from "../../src/config/load.ts";
import { objectNamesOf, routingObjectNames } from "../../src/sharding/partition.ts";
import type { GroupIds } from "../../src/routing/protocol.ts";
import type { Env } from "../env.ts";
import type { RecentFleet } from "../fleet.ts";

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

/** The group's objects: its own, or one per shard. */
function objectsOf(env: Env, group: Pick<ResolvedGroup, "name" | "shards" | "locationHint">): GroupStub[] {
  return objectNamesOf(group.name, group.shards).map((name) => groupObject(env, name, group.locationHint));
}

/** Asks each of the group's objects at once; fails when any cannot answer. */
export function askEachObject<T>(env: Env, group: Pick<ResolvedGroup, "name" | "shards" | "locationHint">, ask: (object: GroupStub) => Promise<T>): Promise<T[]> {
  return Promise.all(objectsOf(env, group).map(ask));
}

/**
 * What each of the groups' objects answered, at once: per group, the answers and whether every
 * object gave one. The objects of shards a group gave up are asked too (after its shards'): they
 * hold requests still in flight, and what they counted, which would otherwise fall.
 */
export async function askEveryObject<T>(env: Env, fleet: RecentFleet, ask: (object: GroupStub, group: ResolvedGroup) => Promise<T>): Promise<{ group: string; answers: T[]; complete: boolean }[]> {
  return Promise.all(
    fleet.groups.map(async (g) => {
      const objects = routingObjectNames(g.name, g.shards, fleet.objects.get(g.name)).map((name) => groupObject(env, name, g.locationHint));
      const settled = await Promise.allSettled(objects.map((o) => ask(o, g)));
      const answers: T[] = [];
      for (const [i, s] of settled.entries()) {
        if (s.status === "fulfilled") answers.push(s.value);
        else console.error(`kvgate: routing object ${i} of group ${g.name} did not answer: ${s.reason instanceof Error ? s.reason.message : String(s.reason)}`);
      }
      return { group: g.name, answers, complete: answers.length === settled.length };
    }),
  );
}

/** The group as this isolate's fleet has it, for a routing object's status and metrics (GroupIds). */
export function groupIds(g: ResolvedGroup): GroupIds {
  return { rev: g.rev, ids: g.deployments.map((d) => d.id) };
}
