import { atMost } from "../../src/at-most.ts";
import type { ResolvedGroup } from "../../src/config/load.ts";
import { objectNamesOf, routingObjectNames } from "../../src/sharding/partition.ts";
import type { GroupIds } from "../../src/routing/protocol.ts";
import { groupObject } from "../../durable-objects/group-stub.ts";
import type { Env } from "../env.ts";
import type { RecentFleet } from "../fleet.ts";

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
 * What a group's objects answered, at once: `answers`, and the names of the `objects` that gave
 * them. The objects of shards the group gave up (`objects` of the registry: GroupRecord.objects)
 * are asked too, after its shards': they hold requests still in flight, and what they counted
 * until they hand it over. `complete`: each of its shards' objects answered. One of a shard it
 * gave up that did not is named in `unanswered`: what it holds is then unknown, but the group is
 * whole without it (it routes nothing). `until` (a Date.now() time): an object that has not
 * answered by then did not answer.
 */
export async function askGroup<T>(
  env: Env,
  g: Pick<ResolvedGroup, "name" | "shards" | "locationHint">,
  objects: number | undefined,
  ask: (object: GroupStub) => Promise<T>,
  until?: number,
): Promise<{ group: string; answers: T[]; objects: string[]; complete: boolean; unanswered: string[] }> {
  const own = objectNamesOf(g.name, g.shards).length;
  const names = routingObjectNames(g.name, g.shards, objects);
  const settled = await Promise.allSettled(names.map((name) => answerBy(until, () => ask(groupObject(env, name, g.locationHint)))));
  const answered = { group: g.name, answers: [] as T[], objects: [] as string[], complete: true, unanswered: [] as string[] };
  for (const [i, s] of settled.entries()) {
    const name = names[i] as string;
    if (s.status === "fulfilled") {
      answered.answers.push(s.value);
      answered.objects.push(name);
      continue;
    }
    console.error(`kvgate: routing object ${i} of group ${g.name}${i < own ? "" : " (of a shard it gave up)"} did not answer: ${s.reason instanceof Error ? s.reason.message : String(s.reason)}`);
    if (i < own) answered.complete = false;
    else answered.unanswered.push(name);
  }
  return answered;
}

/**
 * Groups whose routing objects one read of the whole fleet (GET /admin/v1/status, /metrics,
 * /v1/kvgate/status) asks at once: a large fleet's calls wait their turn rather than all going
 * out of one request together (a thousand groups, a thousand calls). A group's own objects (its
 * shards') are asked together.
 */
const GROUPS_AT_ONCE = 32;

/**
 * How long one read of the whole fleet waits on the routing objects. One that has not answered by
 * then counts as one that did not answer (its group down in /metrics, unavailable in
 * /v1/kvgate/status), and the groups not yet asked are not: else one object that never answers
 * holds the whole read, and a Prometheus scrape (10 s by default) or the dashboard's refresh
 * (10 s) fails whole. A fresh gateway's thousand groups, every object woken, answered in 3–7.5 s
 * in workerd on a busy 2-core machine, and at times past 8 s (the first read then left some out).
 */
const FLEET_READ_MS = 8_000;

/**
 * For a read of the whole fleet arriving now: the Date.now() time by which its routing objects
 * must answer (eachGroup's `until`). Counted from its arrival, the registry's read within it: a
 * slow registry cannot carry the read past the scrape's 10 s.
 */
export function fleetReadDeadline(): number {
  return Date.now() + FLEET_READ_MS;
}

/** `call`'s answer, or a failure once `until` (a Date.now() time) passes first; past it, not made. */
function answerBy<T>(until: number | undefined, call: () => Promise<T>): Promise<T> {
  if (until === undefined) return call();
  const left = until - Date.now();
  if (left <= 0) return Promise.reject(new Error(`not asked: the read's ${FLEET_READ_MS / 1000} s were over`));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within the read's ${FLEET_READ_MS / 1000} s`)), left);
  });
  // call() in a then: were it to throw at once, the race would still settle, and clear the timer.
  return Promise.race([Promise.resolve().then(call), late]).finally(() => clearTimeout(timer));
}

/**
 * `fn` over each of the fleet's `groups`, GROUPS_AT_ONCE at a time, the answers in their order;
 * `until` (fleetReadDeadline, taken when the read arrived), the time by which the read's calls to
 * the routing objects must answer (askGroup's).
 */
export function eachGroup<G, R>(groups: readonly G[], fn: (group: G, until: number) => Promise<R>, until: number): Promise<R[]> {
  return atMost(GROUPS_AT_ONCE, groups, (g) => fn(g, until));
}

/** askGroup over every group of the fleet (eachGroup: a bounded number at a time, by `until`). */
export function askEveryObject<T>(env: Env, fleet: RecentFleet, ask: (object: GroupStub, group: ResolvedGroup) => Promise<T>, until: number) {
  return eachGroup(fleet.groups, (g, until) => askGroup(env, g, fleet.objects.get(g.name), (o) => ask(o, g), until), until);
}

/** The group as this isolate's fleet has it, for a routing object's status and metrics (GroupIds). */
export function groupIds(g: ResolvedGroup): GroupIds {
  return { rev: g.rev, ids: g.deployments.map((d) => d.id) };
}
