import type { LeaseRelease } from "../../src/routing/group-router.ts";
import type { Env, WaitUntil } from "../env.ts";

/**
 * Finished leases of this isolate, per model group. They ride along with the isolate's next
 * route call to that group, so steady traffic costs one Durable Object call per request; an
 * idle isolate flushes them itself after `flushMs`.
 */
const pending = new Map<string, LeaseRelease[]>();
const timerArmed = new Set<string>();

export function takePending(group: string): LeaseRelease[] {
  const list = pending.get(group);
  if (!list || list.length === 0) return [];
  pending.set(group, []);
  return list;
}

/** Puts back releases whose route call failed; the next call carries them. */
export function requeue(group: string, released: LeaseRelease[]): void {
  if (released.length === 0) return;
  const list = pending.get(group);
  if (list) list.push(...released);
  else pending.set(group, [...released]);
}

export function queueRelease(group: string, release: LeaseRelease, env: Env, ctx: WaitUntil, flushMs: number): void {
  requeue(group, [release]);
  if (timerArmed.has(group)) return;
  timerArmed.add(group);
  // The timer runs under the finishing request's waitUntil, and gets its own stub there:
  // a stub belongs to the request that created it.
  ctx.waitUntil(
    new Promise<void>((resolve) => setTimeout(resolve, flushMs)).then(async () => {
      timerArmed.delete(group);
      const batch = takePending(group);
      if (batch.length === 0) return;
      try {
        await env.MODEL_GROUP.getByName(group).release(group, batch);
      } catch (e) {
        requeue(group, batch);
        console.error(`kvgate: releasing ${batch.length} lease(s) of ${group} failed: ${(e as Error).message}`);
      }
    }),
  );
}
