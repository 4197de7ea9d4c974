import type { ResolvedGroup } from "../../src/config/load.ts";
import { unavailable } from "../../src/openai/errors.ts";
import { isVersionRefusal, type LeaseOutcome, type LeaseRelease, type RouteCall, type RouteDecision, type RouteRefusal } from "../../src/routing/protocol.ts";
import type { Env, WaitUntil } from "../env.ts";

/**
 * The Worker's side of the group's Durable Object: the route call, and the leases it hands out.
 * Finished leases of this isolate wait here, per group, and ride along with the isolate's next
 * route call to that group, so steady traffic costs one Durable Object call per request; an idle
 * isolate flushes them itself after `flushMs`.
 */
const pending = new Map<string, LeaseRelease[]>();
const flushArmed = new Set<string>();

function takePending(group: string): LeaseRelease[] {
  const list = pending.get(group);
  if (!list || list.length === 0) return [];
  pending.set(group, []);
  return list;
}

/** Puts back releases whose call failed; the next call carries them (a release counts once however often it comes). */
function requeue(group: string, released: LeaseRelease[]): void {
  if (released.length === 0) return;
  const list = pending.get(group);
  if (list) list.push(...released);
  else pending.set(group, [...released]);
}

/** Sends the finished leases that wait when no route call is coming to carry them. */
async function flush(group: string, env: Env): Promise<void> {
  const batch = takePending(group);
  if (batch.length === 0) return;
  try {
    await env.MODEL_GROUP.getByName(group).release(batch);
  } catch (e) {
    requeue(group, batch);
    console.error(`kvgate: releasing ${batch.length} lease(s) of ${group} failed: ${(e as Error).message}`);
  }
}

function queueRelease(group: string, release: LeaseRelease, env: Env, ctx: WaitUntil, flushMs: number): void {
  requeue(group, [release]);
  if (flushArmed.has(group)) return;
  flushArmed.add(group);
  // The timer runs under the finishing request's waitUntil, and gets its own stub there:
  // a stub belongs to the request that created it.
  ctx.waitUntil(
    new Promise<void>((resolve) => setTimeout(resolve, flushMs)).then(() => {
      flushArmed.delete(group);
      return flush(group, env);
    }),
  );
}

/**
 * Picks a backend of `group` for the prompt's hash chain and takes its slot, carrying the
 * isolate's finished leases along. `exclude`: ids of backends this request already failed on.
 * The object routes with this isolate's version of the group; one that does not know it yet is
 * sent the group's config, once.
 */
export async function route(env: Env, group: ResolvedGroup, chain: number[], exclude: readonly string[], model: string): Promise<RouteDecision | RouteRefusal> {
  const released = takePending(group.name);
  const call: RouteCall = { version: group.version, chain, released, exclude: [...exclude] };
  try {
    const stub = env.MODEL_GROUP.getByName(group.name);
    let answer = await stub.route(call);
    // It processed the releases already.
    if (isVersionRefusal(answer)) answer = await stub.route({ ...call, released: [], group });
    if (isVersionRefusal(answer)) throw new Error(`it refused version ${group.version} with the group's config attached`);
    return answer;
  } catch (e) {
    requeue(group.name, released);
    console.error(`kvgate: route call for ${group.name} failed: ${(e as Error).message}`);
    throw unavailable(`routing for model "${model}" is unavailable`, "routing_unavailable");
  }
}

/** A backend's slot, held by one upstream attempt until it settles. */
export interface HeldLease {
  readonly backendId: string;
  /** Ends the lease with its outcome; only the first call counts. */
  settle(outcome: LeaseOutcome, ttftMs?: number): void;
}

/** Holds the slot `decision` took; the isolate stays alive (waitUntil) until the lease is settled. */
export function holdLease(decision: RouteDecision, group: ResolvedGroup, env: Env, ctx: WaitUntil, flushMs: number): HeldLease {
  let done!: () => void;
  ctx.waitUntil(new Promise<void>((r) => (done = r)));
  let settled = false;
  return {
    backendId: decision.backendId,
    settle(outcome, ttftMs) {
      if (settled) return;
      settled = true;
      queueRelease(group.name, { lease: decision.lease, outcome, ...(ttftMs === undefined ? {} : { ttftMs }) }, env, ctx, flushMs);
      done();
    },
  };
}
