import { modelIndex, type ResolvedGroup } from "../src/config/load.ts";
import { unavailable, type GatewayError } from "../src/openai/errors.ts";
import type { FleetSnapshot } from "../src/fleet/protocol.ts";
import { REGISTRY_NAME } from "../src/fleet/registry-name.ts";
import { KEY_RECORD_MAX_AGE_MS } from "../src/tenants/key-record.ts";
import type { Env, WaitUntil } from "./env.ts";

/** The fleet as this isolate routes with it: the registry's snapshot, indexed by model name. */
export interface FleetView {
  rev: number;
  groups: ResolvedGroup[];
  byModel: Map<string, ResolvedGroup>;
  /** FleetSnapshot.objects: groups with routing objects beyond their shards, and how many they have had. */
  objects: ReadonlyMap<string, number>;
  /** FleetSnapshot.seed: the config modelGroups the fleet took last, by hash. */
  seed: string | null;
}

/**
 * An unknown model name, or a read of the whole fleet, sends the isolate to the registry at most
 * this often: a new group is found within it, and a client naming models that do not exist (or a
 * scraper) cannot turn every request into a registry call.
 */
const REFRESH_MS = 1000;

let current: FleetView | null = null;
let fetchedAt = 0;
/** When a read of the registry last failed. */
let failedAt = -Infinity;
let refreshing = false;

/** The isolate's fleet; null before its first load. */
export function cachedFleet(): FleetView | null {
  return current;
}

/**
 * Reads the registry's snapshot. Every caller makes its own call (a promise of another request's
 * I/O is not one to await); a snapshot older than the one held is dropped.
 */
export async function loadFleet(env: Env): Promise<FleetView> {
  const snap: FleetSnapshot = await env.FLEET.getByName(REGISTRY_NAME).snapshot();
  fetchedAt = Date.now();
  if (!current || snap.rev >= current.rev) {
    const groups = keptGroups(snap.groups, current);
    current = { rev: snap.rev, groups, byModel: modelIndex(groups), objects: new Map(Object.entries(snap.objects ?? {})), seed: snap.seed ?? null };
  }
  return current;
}

/**
 * The snapshot's groups, each the object held where its name, content (`version`) and revision are
 * the same: what an isolate keeps per group object — its hook pipeline (workers/config.ts), its
 * deployments' reach — lasts across reads that changed nothing of the group, once per version as
 * they say, not once per read.
 */
function keptGroups(groups: ResolvedGroup[], held: FleetView | null): ResolvedGroup[] {
  if (!held) return groups;
  const byName = new Map(held.groups.map((g) => [g.name, g]));
  return groups.map((g) => {
    const was = byName.get(g.name);
    return was !== undefined && was.version === g.version && was.rev === g.rev ? was : g;
  });
}

/**
 * The answer to a call the registry could not take (overloaded, or being reset): a 503 to retry,
 * its cause to the log. `message` says what became of a change that may have reached it.
 */
export function registryUnavailable(e: unknown, message = "the fleet registry is unavailable"): GatewayError {
  console.error(`kvgate: calling the fleet registry failed: ${(e as Error).message}`);
  return unavailable(message, "routing_unavailable");
}

/**
 * What an admin route throws when its call to the registry failed: registryUnavailable's 503 when
 * a retry may mend it (the runtime says so: `overloaded`, `retryable`), and the error itself
 * otherwise, a 500 — a bug, a write its storage refused — which no retry mends.
 */
export function registryFailure(e: unknown, message?: string): unknown {
  return mayRetry(e) ? registryUnavailable(e, message) : e;
}

/** Whether the runtime says a failed Durable Object call may be retried: `overloaded`, or `retryable` (an object reset by a deploy). */
export function mayRetry(e: unknown): boolean {
  const said = typeof e === "object" && e !== null ? (e as { overloaded?: unknown; retryable?: unknown }) : {};
  return said.overloaded === true || said.retryable === true;
}

/**
 * A routing object knows a later revision of a group than this isolate's: the isolate reads the
 * registry again, after this request, once however many requests notice.
 */
export function fleetBehind(env: Env, ctx: WaitUntil): void {
  if (refreshing) return;
  refreshing = true;
  ctx.waitUntil(
    loadFleet(env)
      .catch((e: unknown) => console.error(`kvgate: reading the fleet registry failed: ${(e as Error).message}`))
      .finally(() => (refreshing = false)),
  );
}

/**
 * The registry's snapshot for a request that can do without it: null when the registry cannot be
 * reached (overloaded, or being reset), which is logged and counts as a read for the once-a-second
 * bound, so an outage does not send every such request to it again.
 */
export async function reloadFleet(env: Env): Promise<FleetView | null> {
  try {
    return await loadFleet(env);
  } catch (e) {
    fetchedAt = failedAt = Date.now();
    console.error(`kvgate: reading the fleet registry failed: ${(e as Error).message}`);
    return null;
  }
}

/**
 * The fleet at revision `rev` or later, for a request a routing object told its isolate is behind
 * (workers/gateway/proxy.ts GroupPath): the isolate's own when another request read it since, else
 * read afresh; null when it cannot be. Within a second of a read that failed, null at once: while
 * the registry cannot be reached, requests go on with the fleet the isolate holds rather than each
 * waiting on it.
 */
export async function fleetAtLeast(env: Env, rev: number): Promise<FleetView | null> {
  if (current && current.rev >= rev) return current;
  if (Date.now() - failedAt < REFRESH_MS) return null;
  return reloadFleet(env);
}

/**
 * How long a read of the whole fleet waits on the registry before it goes on with the snapshot the
 * isolate holds: a registry slow to answer (a seed, a burst of heartbeats), or not answering, must
 * not hold a scrape past Prometheus's 10 s. Within the read's 8 s (group-object.ts FLEET_READ_MS,
 * counted from its arrival), it leaves the routing objects 6.
 */
const REGISTRY_WAIT_MS = 2_000;

/**
 * The fleet for what reads all of it — /metrics, /v1/kvgate/status, the model list — read afresh
 * at most once a second. Nothing on such a read's path tells an isolate the fleet changed (a route
 * call does, for its own group only), and scrapes keep an isolate alive for hours. With the
 * registry unreachable, or not answering within REGISTRY_WAIT_MS, the isolate's snapshot (`held`,
 * the app's, before any was read); a read given up on goes on beside the request (`ctx`), and its
 * snapshot, when it lands, is the isolate's (loadFleet).
 */
export async function recentFleet(env: Env, ctx: WaitUntil, held: readonly ResolvedGroup[]): Promise<RecentFleet> {
  if (current && Date.now() - fetchedAt < REFRESH_MS) return current;
  // One read given up on is still under way: the snapshot held, not another call to a registry that
  // does not answer (a scraped isolate would else hold one more each second, each with its line).
  if (current && Date.now() - givenUpAt < GIVEN_UP_MS) return current;
  // Counted from now: reads at the same moment take the snapshot held, not a registry call each.
  fetchedAt = Date.now();
  const read = reloadFleet(env);
  // An isolate that holds no fleet has none to go on with: it waits, as its first request does.
  if (!current) return (await read) ?? { groups: held, objects: new Map() };
  ctx.waitUntil(read);
  const got = await readWithin(read, REGISTRY_WAIT_MS);
  if (got === undefined) {
    const at = (givenUpAt = Date.now());
    // Only its own landing lifts the guard: an earlier read given up on, landing late, leaves a later one's.
    const landed = () => void (givenUpAt === at && (givenUpAt = -Infinity));
    read.then(landed, landed);
  }
  return got ?? current;
}

/**
 * How long a read given up on (REGISTRY_WAIT_MS) keeps others from starting: until it lands, or at
 * most this long, about as long as the runtime keeps a request's waitUntil going after its answer.
 */
const GIVEN_UP_MS = 30_000;
/** When a read of the whole fleet was given up on while still under way; −Infinity: none is. */
let givenUpAt = -Infinity;

/** The read's fleet, null when it failed, or undefined when it has not come within `ms`. */
async function readWithin(read: Promise<FleetView | null>, ms: number): Promise<FleetView | null | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => {
      console.error(`kvgate: the fleet registry has not answered in ${ms / 1000} s: going on with the fleet this isolate holds`);
      resolve(undefined);
    }, ms);
  });
  try {
    return await Promise.race([read, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The model names as recentFleet's read has them, for a look-up of one (GET /v1/models/{id}): one
 * removed or moved since the isolate's snapshot is found as the list finds it, not as the snapshot
 * had it. `held`: the app's, while the isolate has read no fleet.
 */
export async function recentModels(env: Env, ctx: WaitUntil, held: Map<string, ResolvedGroup>): Promise<Map<string, ResolvedGroup>> {
  await recentFleet(env, ctx, []);
  return current?.byModel ?? held;
}

/**
 * How old a snapshot an open realtime session's re-checks go on with: as old as the key record
 * they check may be, so a change to the fleet (a group's pricing dropped) ends a session within
 * the bound a change to its key does. A session's calls are all its handshake's invocation's, which
 * Cloudflare caps at 1,000 Durable Object calls on a free plan (10,000 by default on a paid one):
 * at REFRESH_MS, a quiet isolate's session read the registry 3,600 times an hour.
 */
const SESSION_REFRESH_MS = KEY_RECORD_MAX_AGE_MS;

/** recentModels for an open session's re-checks: the isolate's snapshot until it is SESSION_REFRESH_MS old. */
export async function sessionModels(env: Env, ctx: WaitUntil, held: Map<string, ResolvedGroup>): Promise<Map<string, ResolvedGroup>> {
  if (current && Date.now() - fetchedAt < SESSION_REFRESH_MS) return current.byModel;
  return recentModels(env, ctx, held);
}

/** What a read of the whole fleet needs of it: its groups, and the routing objects of shards they gave up. */
export type RecentFleet = { readonly groups: readonly ResolvedGroup[]; readonly objects: ReadonlyMap<string, number> };

/**
 * A model this isolate does not know may be a group added since its snapshot: looked up afresh, at
 * most once a second. With the registry unreachable, the isolate's snapshot is all it knows.
 */
export async function freshGroup(env: Env, model: string): Promise<{ group: ResolvedGroup; fleet: FleetView } | null> {
  if (Date.now() - fetchedAt < REFRESH_MS) return null;
  const fleet = await reloadFleet(env);
  const group = fleet?.byModel.get(model);
  return fleet && group ? { group, fleet } : null;
}
