import type { ResolvedGroup } from "../../src/config/load.ts";
import { unavailable, type GatewayError } from "../../src/openai/errors.ts";
import { isVersionRefusal, type KeyBudget, type LeaseOutcome, type LeaseRelease, type LeaseRenewal, type LimitRefusal, type RouteCall, type RouteDecision, type RouteRefusal, type RenewalAnswers, type RouteTenant, type SpillLimit, type TokenUsage } from "../../src/routing/protocol.ts";
import { shardOfObject } from "../../src/sharding/partition.ts";
import { ShardChoice } from "../../src/sharding/shard-choice.ts";
import { ServedElsewhere } from "../../src/sharding/served-elsewhere.ts";
import { judgedBySilence } from "../../src/routing/silence.ts";
import { FLUSH_RETRY_FIRST_MS, flushRetryMs, isDue, LeaseBook, renewEveryMs, renewLater, type Holding } from "../../src/routing/lease-book.ts";
import type { Env, WaitUntil } from "../env.ts";
import { groupObject } from "../../durable-objects/group-stub.ts";
import { fleetBehind } from "../fleet.ts";
import type { Prompt } from "./validate.ts";
import { anyUntried } from "../../src/routing/untried.ts";

/**
 * The Worker's side of the group's Durable Object: the route call, and the leases it hands out.
 * Finished leases of this isolate wait here, per group, and ride along with the isolate's next
 * call to that group, so steady traffic costs one Durable Object call per request; an idle
 * isolate flushes them itself after `flushMs`, and tries again when the object cannot take them
 * (flushRetryMs). Held leases are renewed the same way every
 * leaseTtlMs / 3 — along with the next call, or by a timer of the request holding them — so an
 * object that restarted takes their slots back, and the slots of a Worker that was killed come
 * back within leaseTtlMs. An object whose answer names another incarnation than before restarted
 * since: the isolate sends it every lease it holds there at once (LeaseBook.answeredBy), not at
 * their timers, so it does not count their backends idle for seconds. A sharded group has one
 * object per shard: all of this is per object.
 */
const book = new LeaseBook();
const flushArmed = new Set<string>();
/**
 * Held leases whose key's limits are watched (HeldLease.watchLimits): the limit an object answered
 * a renewal of theirs that the key reached (its budget spent, its tpm), whichever call of the
 * isolate carried it; null until then. Their holder reads it in its own request's context: a
 * socket belongs to the request that opened it.
 */
const limitReached = new Map<string, "budget" | "tpm" | null>();
const shardChoice = new ShardChoice();

/** The isolate read the fleet `groups`: what it learned of groups no longer sharded in it goes (ShardChoice.keepOnly). */
export function fleetRead(groups: readonly ResolvedGroup[]): void {
  shardChoice.keepOnly(groups);
}
/** The locationHint of an object's group, which each stub of it carries (groupObject): a flush may be the object's first call. */
type Hint = ResolvedGroup["locationHint"];
/** What this isolate saw of its sharded groups' backends serving (src/sharding/served-elsewhere.ts). */
const servedElsewhere = new ServedElsewhere();

/**
 * Sends what waits — finished leases and due renewals — when no route call is coming to carry it;
 * when it cannot, it tries again later. `failures`: the tries before this one that failed in a row.
 * Resolves with the object's answers to the renewals (the held leases it found over their key's
 * budget are marked), or null when none came: the call failed, nothing was due, or the object is
 * of a release that gives none. `hint`: its group's locationHint (groupObject).
 */
async function flush(object: string, hint: Hint, env: Env, ctx: WaitUntil, failures = 0): Promise<RenewalAnswers | null> {
  const batch = book.takePending(object);
  const renewing = book.takeRenewals(object, Date.now());
  if (batch.length === 0 && renewing.length === 0) return null;
  const told = begunIn(renewing);
  try {
    const answers = await groupObject(env, object, hint).release(
      batch,
      renewing.map((h) => h.renewal),
    );
    toldBegun(told);
    // An object of a release before these answers nothing, and charges nothing a renewal carries.
    if (typeof answers !== "object" || answers === null || !Array.isArray(answers.spent)) return null;
    for (const lease of answers.spent) if (limitReached.has(lease)) limitReached.set(lease, "budget");
    for (const lease of answers.overTpm ?? []) if (limitReached.get(lease) === null) limitReached.set(lease, "tpm");
    if (typeof answers.incarnation === "string" && book.answeredBy(object, answers.incarnation, renewing)) sendHeld(object, hint, env, ctx);
    return answers;
  } catch (e) {
    book.requeue(object, batch);
    renewLater(renewing);
    console.error(`kvgate: releasing ${batch.length} and renewing ${renewing.length} lease(s) of ${objectLabel(object)} failed: ${(e as Error).message}`);
    const retryMs = flushRetryMs(failures + 1);
    if (retryMs !== null) armFlush(object, hint, env, ctx, retryMs, failures + 1);
    return null;
  }
}

/**
 * `object` restarted since its last answer to this isolate (LeaseBook.answeredBy): every lease the
 * isolate holds there goes to it now (a call going out sooner takes them along instead).
 */
function sendHeld(object: string, hint: Hint, env: Env, ctx: WaitUntil): void {
  ctx.waitUntil(flush(object, hint, env, ctx));
}

/**
 * Of the renewals a call carries, those that say their answer began (LeaseRenewal.serving), taken
 * as the call is made: the runtime sends its arguments then. Once the object took them, each says
 * it no more (toldBegun). Said once, it tells the silence rule the backend served then; said at
 * every renewal, an engine that hung after a stream's first token looked alive for as long as the
 * stream stayed open, and its non-streamed requests' timeouts were never its own.
 */
function begunIn(renewing: readonly Holding[]): Holding[] {
  return renewing.filter((h) => h.renewal.serving === true);
}

/**
 * The object took `told` (begunIn, as the call was made): they say it no more. Not every renewal
 * the call carried: one whose answer began while the call was on its way was sent without it, and
 * cleared then, the object never heard that its backend served (the silence rule then blamed none
 * of a wedged engine's timeouts beside it, and could charge this backend for its own).
 */
function toldBegun(told: readonly Holding[]): void {
  for (const h of told) delete h.renewal.serving;
}

/** An object's name as a log line shows it: a shard's with its number after the group's. */
function objectLabel(object: string): string {
  const { group, shard } = shardOfObject(object);
  return shard === 0 ? group : `${group} (shard ${shard})`;
}

function queueRelease(object: string, hint: Hint, release: LeaseRelease, env: Env, ctx: WaitUntil, flushMs: number): void {
  book.requeue(object, [release]);
  armFlush(object, hint, env, ctx, flushMs, 0);
}

/** A flush of `object` after `delayMs`, unless one is armed already (it will carry what waits then). */
function armFlush(object: string, hint: Hint, env: Env, ctx: WaitUntil, delayMs: number, failures: number): void {
  if (flushArmed.has(object)) return;
  flushArmed.add(object);
  // The timer runs under the finishing request's waitUntil, and gets its own stub there:
  // a stub belongs to the request that created it.
  ctx.waitUntil(
    new Promise<void>((resolve) => setTimeout(resolve, delayMs)).then(async () => {
      flushArmed.delete(object);
      await flush(object, hint, env, ctx, failures);
    }),
  );
}

/**
 * A decision, with the object that gave it: the one its lease goes back to; and `recordsUsage`
 * false when the call's key's usage is not recorded (RouteTenant.recordsUsage), which the object
 * took its lease with: the lease's renewals say so, and its release names no key to charge.
 */
export type Routed = RouteDecision & { object: string; recordsUsage?: false };

/**
 * A group's refusal, `unreached` when it is not the whole group's: a shard's object that holds a
 * backend this request did not try could not be asked (overloaded, being reset), so the others'
 * "no backend" says nothing of that backend (HeldFailure.refused).
 */
export type GroupRefusal = RouteRefusal & { unreached?: true };

/**
 * Why a group gave the request no backend, as the client is told it: its refusal, or `unreached`
 * for one marked so — a routing object could not be asked, which may hold healthy servers: the
 * answer a group of one object unreachable gets (routingUnavailable), not "every one is failing".
 */
export type NoBackendCause = RouteRefusal["refused"] | "unreached";

/** `refusal`'s cause: `unreached` when it is marked so, its own word otherwise. */
export function refusalCause(refusal: GroupRefusal): NoBackendCause {
  return refusal.unreached ? "unreached" : refusal.refused;
}

/** The 503 for a model whose routing could not be asked. */
export function routingUnavailable(model: string): GatewayError {
  return unavailable(`routing for model "${model}" is unavailable`, "routing_unavailable");
}

/**
 * Picks a backend of `group` for the prompt (its hash chain, and its size past the chain) and takes its slot, carrying the
 * isolate's finished and held leases along. `exclude`: ids of backends this request already
 * failed on. The object routes with this isolate's version of the group; one that does not know
 * it yet is sent the group's config, once. `tenant`: the request's virtual key, whose limits the
 * object checks before it takes a slot. `failover`: the attempt follows a failed one, or serves a
 * fallback group (the object counts it so). A sharded group's shards are asked in the order its
 * prompt keys them to (ShardChoice), the next when one has no backend to give, cannot be reached,
 * or passes the prompt on as the next would serve it sooner or its backends all rest after a 429
 * (asked again last, then without those limits); routing is unavailable only when none could be.
 * A refusal while a shard holding a backend not tried (not in `exclude`) could not be asked is
 * marked `unreached`: the others' refusal is not the group's.
 * `heldOn`: the objects whose backends failed the request server-side, their verdicts held
 * (HeldFailure): asked last, so the attempt that tells whether the failures follow the request is
 * another shard's.
 * `unreachable`: ids of backends this isolate cannot reach as configured, passed over with no
 * failover (RouteCall.unreachable, group-reach.ts). `countedBy`: the request's, the objects that
 * counted them for it (RouteCall.unreachableCounted); each object is added as it does.
 */
export async function route(env: Env, ctx: WaitUntil, group: ResolvedGroup, prompt: Prompt, exclude: readonly string[], model: string, tenant?: RouteTenant, failover = false, heldOn: readonly string[] = [], unreachable: readonly string[] = [], countedBy = new Set<string>()): Promise<Routed | GroupRefusal | LimitRefusal> {
  if (!(group.shards > 1)) return routeOn(env, ctx, group, group.name, group, prompt, exclude, model, tenant, failover, unreachable, countedBy);
  const plan = shardChoice.order(group, prompt.chain, Date.now(), prompt.blocks);
  for (const object of heldOn) shardChoice.askLast(plan, object);
  const { shards, order } = plan;
  let refusal: RouteRefusal | undefined;
  let limited: LimitRefusal | undefined;
  let spilled = false;
  let failed: unknown = null;
  // A shard not asked holds a backend the request did not try.
  let unreached = false;
  // Shards asked again (pushed after a `spill`) are asked without the limits that let them pass a prompt on.
  const firstAsks = order.length;
  for (let k = 0; k < order.length; k++) {
    const s = order[k] as number;
    const object = shards.objectNames[s] as string;
    shardChoice.sent(object);
    let answer: Routed | RouteRefusal | LimitRefusal;
    try {
      const othersLeft = k < firstAsks && k < order.length - 1;
      answer = await routeOn(env, ctx, group, object, shards.views[s] as ResolvedGroup, prompt, exclude, model, tenant, failover, unreachable, countedBy, k === 0 ? plan.spill : undefined, spilled && s !== order[0], othersLeft);
    } catch (e) {
      // An object that cannot answer (overloaded, or being reset) is a shard with nothing to give: the next may.
      shardChoice.ended(object);
      failed = e;
      if (!unreached) unreached = anyUntried((shards.views[s] as ResolvedGroup).deployments, exclude, unreachable);
      continue;
    }
    if (!("refused" in answer)) {
      shardChoice.answered(object, answer);
      shardChoice.placed(group, plan, s);
      return answer;
    }
    shardChoice.ended(object);
    if (answer.refused === "limited") {
      // The key's limits are each shard's own, and the prompt's own shard's to say; where it was only
      // passed on to, the shard that passed it serves it. A budget is the key's everywhere.
      if (!spilled || answer.limit === "budget") return answer;
      limited = answer;
      continue;
    }
    if (answer.refused === "spill") {
      spilled = true;
      order.push(s);
      continue;
    }
    // Full beats empty: a request that found every shard without a backend to give, some only at their cap, hears "at capacity".
    if (!refusal || answer.refused === "at-capacity") refusal = answer;
  }
  // No shard could take it: the key's limit, where one was met, is what the client can act on. One
  // met where the prompt was passed on to was not counted there: the key's metrics miss this rare 429.
  if (limited) return limited;
  if (refusal) return unreached ? { ...refusal, unreached: true } : refusal;
  if (failed) throw failed;
  return { refused: "no-backend", rev: group.rev };
}

/** One route call to one object of the group; `view`: the config it routes with, sent when it does not know the version. */
async function routeOn(env: Env, ctx: WaitUntil, group: ResolvedGroup, object: string, view: ResolvedGroup, prompt: Prompt, exclude: readonly string[], model: string, tenant: RouteTenant | undefined, failover: boolean, unreachable: readonly string[], countedBy: Set<string>, spill?: SpillLimit, passedOn = false, othersLeft = false): Promise<Routed | RouteRefusal | LimitRefusal> {
  const released = book.takePending(object);
  const renewing = book.takeRenewals(object, Date.now());
  const call: RouteCall = { version: group.version, chain: prompt.chain, released, renewed: renewing.map((h) => h.renewal), exclude: [...exclude] };
  const told = begunIn(renewing);
  if (prompt.blocks > prompt.chain.length) call.blocks = prompt.blocks;
  if (prompt.media) call.media = true;
  if (prompt.partial) call.partial = true;
  if (tenant) call.tenant = tenant;
  if (failover) call.failover = true;
  if (unreachable.length > 0) call.unreachable = [...unreachable];
  if (unreachable.length > 0 && countedBy.has(object)) call.unreachableCounted = true;
  if (spill) call.spill = spill;
  if (passedOn) call.passedOn = true;
  if (othersLeft) call.othersLeft = true;
  // Once the object answered, it has processed the releases, whatever comes after.
  let delivered = false;
  try {
    const stub = groupObject(env, object, group.locationHint);
    let answer = await stub.route(call);
    delivered = true;
    // The renewals go again, now that it will know their version.
    if (isVersionRefusal(answer)) answer = await stub.route({ ...call, released: [], group: view });
    if (isVersionRefusal(answer)) throw new Error(`it refused version ${group.version} with the group's config attached`);
    toldBegun(told);
    if (unreachable.length > 0) countedOn(object, answer, countedBy);
    // A decision or a refusal for want of a backend has the request read the fleet itself (GroupPath); a key's limit ends it.
    if (answer.rev > group.rev && "refused" in answer && answer.refused === "limited") fleetBehind(env, ctx);
    if ("refused" in answer) return answer;
    if (book.answeredWith(object, answer.lease, renewing)) sendHeld(object, group.locationHint, env, ctx);
    // The answer is this call's own copy: marked, not copied.
    const routed: Routed = Object.assign(answer, { object });
    if (tenant?.recordsUsage === false) routed.recordsUsage = false;
    return routed;
  } catch (e) {
    // Sent again, a release it processed would count its key's usage twice.
    if (!delivered) book.requeue(object, released);
    renewLater(renewing);
    // No later call may come to carry them (the request fails over to another shard, or fails): they go as a failed flush's do.
    if ((!delivered && released.length > 0) || renewing.length > 0) armFlush(object, group.locationHint, env, ctx, FLUSH_RETRY_FIRST_MS, 1);
    console.error(`kvgate: route call for ${objectLabel(object)} failed: ${(e as Error).message}`);
    throw routingUnavailable(model);
  }
}

/**
 * `object` counted the request's unreachable backends it holds (RouteCall.unreachableCounted) unless
 * the key's limits refused the call first: it looked at no backend then.
 */
function countedOn(object: string, answer: RouteDecision | RouteRefusal | LimitRefusal, countedBy: Set<string>): void {
  if (!("refused" in answer && answer.refused === "limited")) countedBy.add(object);
}

/**
 * Hands `decision`'s slot back unused, with no verdict on its backend: the request goes elsewhere
 * for reasons of its own (GroupPath.afterDecision).
 */
export function giveBack(decision: Routed, group: ResolvedGroup, env: Env, ctx: WaitUntil, flushMs: number): void {
  holdLease(decision, group, env, ctx, flushMs).settle("client-abort");
}

/** What an answered attempt tells of itself when its lease ends: its timings, and the upstream's usage when it was read. */
export type AttemptEnd = Pick<LeaseRelease, "ttftMs" | "durationMs" | "usage" | "streamed" | "estimate" | "retryAfterMs" | "timedOut" | "failure" | "viaGateway">;

/**
 * What an attempt whose bound passed with no answer tells of itself (LeaseRelease.timedOut): a
 * request's first byte, a non-streamed answer, a realtime handshake. A breaker such silence
 * opened takes no good health probe as evidence (src/routing/breaker.ts).
 */
export const SILENT: AttemptEnd = { timedOut: true };

/** A backend's slot, held by one upstream attempt until it settles. */
export interface HeldLease {
  readonly backendId: string;
  /** The routing object that gave it (a sharded group's shard). */
  readonly object: string;
  /** How often the lease is renewed while held (leaseTtlMs / 3). */
  readonly renewEveryMs: number;
  /** Renews it now if no call to its object carried a renewal for half that interval: for a holder that times its own renewals. */
  renewIfDue(): void;
  /** Renews it by a timer of its own until it is settled: for a holder with no timer to carry it. */
  keepRenewed(): void;
  /**
   * For a holder that reads its usage as it goes (a realtime session): charges the key all it
   * used so far (what was charged before is not charged again), at once, with the lease's
   * renewal; resolves once the object answered, or the call failed (later renewals carry it).
   */
  charge(soFar: TokenUsage): Promise<void>;
  /** Sends the key's budget and tpm (as the holder last read them) with the lease's renewals, to be told when one is reached. */
  watchLimits(budget: KeyBudget | null, tpm: number | null): void;
  /** The limit an object answered a renewal of the lease that its key reached (its budget spent, its tpm); null: none. */
  readonly limitReached: "budget" | "tpm" | null;
  /** Its answer began (a stream's first token): its renewals say so from now on (LeaseRenewal.serving). */
  began(): void;
  /** Ends the lease with its outcome; only the first call counts. */
  settle(outcome: LeaseOutcome, end?: AttemptEnd): void;
}

/**
 * Holds the slot `decision` took; the isolate stays alive (waitUntil) until the lease is settled,
 * and while it does, the lease is renewed along with any call to the group, and otherwise by its
 * holder's timer: an upstream attempt's own limit timer (attempt.ts; most requests end long
 * before a renewal is due, and a timer of the lease's own cost each of them a set and a clear of
 * the runtime's, ~10 µs), or the lease's when asked (keepRenewed).
 */
export function holdLease(decision: Routed, group: ResolvedGroup, env: Env, ctx: WaitUntil, flushMs: number, key?: string): HeldLease {
  let done!: () => void;
  ctx.waitUntil(new Promise<void>((r) => (done = r)));
  const everyMs = renewEveryMs(group.leaseTtlMs);
  const renewal: LeaseRenewal = { lease: decision.lease, version: group.version, backendId: decision.backendId };
  // Whether the lease's usage is its key's: a key whose usage is not recorded is charged nothing by
  // the object that took the lease, nor by one that takes it back from a renewal or gets its release.
  const records = key !== undefined && decision.recordsUsage !== false;
  if (key !== undefined) renewal.key = key;
  if (key !== undefined && !records) renewal.recordsUsage = false;
  const { object } = decision;
  const hint = group.locationHint;
  const mine = book.hold(object, renewal, everyMs, Date.now());
  const renewIfDue = () => {
    if (isDue(mine, Date.now())) ctx.waitUntil(flush(object, hint, env, ctx));
  };
  let timer: ReturnType<typeof setInterval> | undefined;
  let settled = false;
  // One charge at a time, each with all used until it goes: a later one carries what an earlier held.
  let charging = Promise.resolve();
  return {
    backendId: decision.backendId,
    object,
    renewEveryMs: everyMs,
    renewIfDue,
    keepRenewed() {
      if (!settled && timer === undefined) timer = setInterval(renewIfDue, everyMs);
    },
    charge(soFar) {
      // Renewals that ride along with other calls carry it too: a charge that fails goes with the next.
      renewal.usage = { ...soFar };
      charging = charging.then(async () => {
        const sent = renewal.usage;
        if (settled || !sent) return;
        mine.renewedAt = 0;
        // What an object answered charging: one that restarts after takes it as charged (LeaseRenewal.charged).
        const answers = await flush(object, hint, env, ctx);
        if (answers && !answers.unheld.includes(decision.lease)) renewal.charged = sent;
      });
      return charging;
    },
    watchLimits(budget, tpm) {
      if (settled) return;
      if (budget) renewal.budget = budget;
      else delete renewal.budget;
      if (tpm !== null) renewal.tpm = tpm;
      else delete renewal.tpm;
      if (!budget && tpm === null) limitReached.delete(decision.lease);
      else if (!limitReached.has(decision.lease)) limitReached.set(decision.lease, null);
    },
    get limitReached() {
      return limitReached.get(decision.lease) ?? null;
    },
    began() {
      renewal.serving = true;
    },
    settle(outcome, end) {
      if (settled) return;
      settled = true;
      if (timer !== undefined) clearInterval(timer);
      book.drop(object, decision.lease);
      limitReached.delete(decision.lease);
      if (group.shards > 1) shardChoice.ended(object);
      const release: LeaseRelease = { lease: decision.lease, outcome };
      // Only the fields that hold something: the release rides along with a later route call.
      if (end?.ttftMs !== undefined) release.ttftMs = end.ttftMs;
      if (end?.durationMs !== undefined) release.durationMs = end.durationMs;
      if (end?.usage) release.usage = end.usage;
      else if (end?.estimate) release.estimate = end.estimate;
      if (release.usage || release.estimate) {
        // An object that no longer holds the lease (restarted, or it expired) records it by these:
        // not the usage read for routing's feedback alone, of a key whose usage is not recorded.
        if (records) {
          release.key = key;
          release.backendId = decision.backendId;
          if (renewal.charged) release.charged = renewal.charged;
        }
      }
      if (end?.streamed) release.streamed = true;
      if (end?.retryAfterMs !== undefined) release.retryAfterMs = end.retryAfterMs;
      if (end?.timedOut) release.timedOut = true;
      if (end?.failure !== undefined) release.failure = end.failure;
      if (end?.viaGateway) release.viaGateway = true;
      if (group.shards > 1) {
        // A shard's object sees only its own backends: another shard's serving is this isolate's to tell.
        if (end?.ttftMs !== undefined || outcome === "ok") servedElsewhere.served(group.name, decision.backendId, Date.now());
        else if (judgedBySilence(release)) {
          const at = servedElsewhere.otherThan(group.name, decision.backendId);
          if (at > -Infinity) release.othersServedAt = at;
        }
      }
      queueRelease(object, hint, release, env, ctx, flushMs);
      done();
    },
  };
}
