import type { ResolvedGroup } from "../../src/config/load.ts";
import { clipName, NAME_MAX } from "../../src/config/schema.ts";
import { canonicalJson } from "../../src/config/version.ts";
import type { LimitRefusal, RouteTenant } from "../../src/routing/protocol.ts";
import { clientGone, GatewayError, notFound, overLimit, retold, SHOULD_RETRY, unavailable } from "../../src/openai/errors.ts";
import { allowsGroup, allowsModel, countsSpendIn, routeTenant, unpricedModel } from "../../src/tenants/route-tenant.ts";
import { logEvent } from "../../src/logging/event-log.ts";
import type { RequestLog } from "../../src/logging/request-log.ts";
import type { LoadedConfig } from "../config.ts";
import type { Env, WaitUntil } from "../env.ts";
import { fleetAtLeast, freshGroup } from "../fleet.ts";
import { attempt, isFailover, OwnTime } from "./attempt.ts";
import type { Caller } from "./auth.ts";
import { readSizedJsonBody } from "./body.ts";
import { asGatewayError } from "./error-answer.ts";
import { Deadline } from "./deadline.ts";
import { GenerationBudget } from "./generation-budget.ts";
import { PassedOver } from "./group-reach.ts";
import { HeldFailure } from "./held-failure.ts";
import { afterFailure, noRetry } from "./after-failure.ts";
import { giveBack, refusalCause, route, routingUnavailable, type NoBackendCause, type Routed } from "./route-client.ts";
import { validate, type Endpoint } from "./validate.ts";
import { anyUntried } from "../../src/routing/untried.ts";

export interface ProxyInput {
  endpoint: Endpoint;
  req: Request;
  env: Env;
  ctx: WaitUntil;
  config: LoadedConfig;
  requestId: string;
  startedAt: number;
  caller: Caller;
  /** The request's log line, when it was sampled. */
  log: RequestLog | null;
}

/**
 * The request path: validate once, fingerprint, one route call to the group's Durable Object,
 * one upstream fetch, and the upstream body handed to the client as it arrives. Before any byte
 * reached the client, a failed attempt (refused connection, no headers in time, a 5xx, a 429) is
 * retried on the next-best backend of the group, then of its fallback groups — unless the failure
 * follows the request: the same server-side failure on a second backend is the request's, so it
 * stops there and neither backend is charged with it — unless a fallback group remains, which is
 * asked before that verdict stands (held-failure.ts awaitsFallback).
 */
export async function proxyCompletion(p: ProxyInput): Promise<Response> {
  const { config, env } = p;
  const raw = await readSizedJsonBody(p.req, config.limits.maxBodyBytes);
  const { body, prompt: promptFor } = validate(p.endpoint, raw.json, config, raw.bytes, p.caller.kind === "master");
  p.log?.asked(body.model, body.stream === true);
  const found = await groupForCaller(env, p.caller, body.model, config.byModel);
  const byModel = found.byModel;
  let primary = found.group;
  const tenant = tenantFor(p.caller, body.model, primary);

  const deadline = new Deadline(primary.totalTimeoutMs);
  const budget = new GenerationBudget(primary.nonStreamTimeoutMs);
  // A server-side failure whose verdict waits for the next attempt's answer.
  const held = new HeldFailure();
  const path = new GroupPath(primary, byModel, p.caller, body.model);
  let group = primary;
  let prompt = promptFor(group);
  let exclude: string[] = [];
  let attempts = 0;
  // Another group's backends (a fallback's, or the model's group as the registry now has it) are
  // others: none of them failed yet. Its own timeouts bound them.
  const entering = (next: ResolvedGroup): void => {
    exclude = [];
    deadline.enter(next.totalTimeoutMs);
    budget.enter(next.nonStreamTimeoutMs);
  };
  // The group whose object let the request's key in: each keeps the key's limits for its own
  // requests, and a request never goes back to a group it left. The first one counted the key's
  // request (RouteTenant.counted): a fallback group after it counts it no more.
  let admittedBy: string | null = null;
  let last: Response | null = null;
  // The cause of the last refusal a group's object gave: the answer when no group is left and no attempt failed.
  let refused: NoBackendCause = "no-backend";
  let relaying = false;
  const failover = new FailoverEvent(p);
  const own = new OwnTime(p.startedAt);
  // The deployments this isolate cannot reach: passed over, no attempt, no word on the others.
  const passed = new PassedOver(env, config.gatewayKeys, p.log, p.caller.kind === "master");
  // Every backend tried answered 404 for the endpoint (held-failure.ts): the groups serve no such
  // thing, a 404 as for a path the gateway does not know, which no SDK retries — unless a group
  // could not be tried, whose refusal stands. A proxy's 403 no second backend confirmed is its
  // backend's own: a 502 to retry.
  const finalAnswer = (answer: Response): Response =>
    untriedRefusalAnswer(held, body.model, answer) ??
    (held.unserved ? withRoutingHeaders(endpointNotServed(body.model, new URL(p.req.url).pathname).toResponse(), answer) : held.answersOwnRefusal ? backendsOwnRefusal(answer) : answer);
  try {
    for (;;) {
      const reach = passed.entering(group);
      const decision = await route(env, p.ctx, group, prompt, exclude, body.model, tenant && { ...tenant, admitted: admittedBy === group.name, counted: admittedBy !== null }, isFailover(attempts + 1, group !== primary), held.heldOn, reach.unreachable, passed.countedBy);
      if ("refused" in decision && decision.refused === "limited") throw limitError(decision, p.caller);
      if ("refused" in decision) {
        refused = decision.refused;
        const refusedBy = group;
        const step = await path.afterRefusal(env, decision);
        // Refused by an object that knows the group newer, the group as it is now is tried again.
        if (step !== "again") held.refused(refusalCause(decision), refusedBy, exclude, reach.unreachable);
        ({ group, primary } = path);
        if (step !== null) {
          prompt = promptFor(group);
          if (group.name !== refusedBy.name) entering(group);
          continue;
        }
        return noneLeft(last, finalAnswer, held, refused, body.model, passed);
      }
      admittedBy = group.name;
      const routed = group;
      // A decision of an object no newer than this isolate's fleet (nearly every one) awaits nothing.
      const next = decision.rev > group.rev ? await path.afterDecision(p, decision) : "go";
      ({ group, primary } = path);
      // The fallback it came from is one the caller may no longer use, and none is left (its lease went back).
      if (next === null) return noneLeft(last, finalAnswer, held, refused, body.model, passed);
      if (next === "again") {
        prompt = promptFor(group);
        if (group.name !== routed.name) entering(group);
        continue;
      }
      // Picked by an object that knows nothing of RouteCall.unreachable: routed again without it, no attempt spent.
      if (passed.passesOver(decision, routed, group, p.ctx, config.releaseFlushMs)) {
        exclude.push(decision.backendId);
        continue;
      }
      attempts++;
      failover.attempting(attempts);
      held.attempting(group.name, passed.of(group).reachable);
      // The lease is the decision's: its shards and version are the group's it was routed on, whatever version the request goes on with.
      const result = await attempt({ p, body, exact: raw.exact, group, decision, routedOn: routed, deadline, generationEndsAt: budget.endsAt, attempts, fellBack: group !== primary, own });
      if (result.kind === "answered") {
        // A 404 for the stored response the request continues says only that this backend lacks it
        // (vLLM keeps each in the memory of the one that made it): after a failure, the backend that
        // failed may hold it. That failure is the answer, one an SDK tries again, and its backend's
        // (held.end()); the 404 would end the conversation. One that lacked the endpoint holds none.
        if (result.notHeld && last && !held.metOnlyUnserved) return finalAnswer(last);
        held.answered(result.rejected);
        relaying = !result.rejected;
        return result.response;
      }
      last = result.response;
      if (result.generationEndsAt !== undefined) budget.failed(result.generationEndsAt, group.nonStreamTimeoutMs);
      if (result.failure.kind !== undefined) p.log?.failed(group.name, result.lease.backendId, result.failure.kind);
      // A failure that follows the request (the SDKs would send it twice more, each time to two
      // more backends to fail on), or one the gateway does not try again (a generation cut at its
      // limit or the request's deadline, which a retry would run whole again): nor should they.
      const followsRequest = held.failed(result.lease, result.verdict, result.failure, result.end);
      if (noRetry(held, followsRequest, result.retryable, result.verdict, result.failure)) last.headers.set(SHOULD_RETRY, "false");
      const then = afterFailure(held, followsRequest, result.retryable, primary.failover, attempts, result.failure, Math.min(deadline.msLeft(), budget.msLeft()));
      if (then.kind === "answer" || (then.kind === "fall-back" && !path.fallBack())) return finalAnswer(last);
      failover.failedOn(group.name, result.lease.backendId, result.failure.cause);
      if (then.kind === "fall-back") {
        ({ group, primary } = path);
        prompt = promptFor(group);
        entering(group);
        own.routingAgain();
        continue;
      }
      exclude.push(result.lease.backendId);
      // Nothing left to wait for: the route call says so at once (and finds a change of the fleet since, if any).
      if (then.waitMs > 0 && !path.nothingLeft(exclude, passed.of(group).unreachable)) await new Promise((r) => setTimeout(r, then.waitMs));
      if (p.req.signal.aborted) throw clientGone();
      own.routingAgain();
    }
  } catch (e) {
    held.thrown(e);
    throw withAttempts(e, attempts);
  } finally {
    held.end();
    // A relayed body is still under the deadline; its end clears it.
    if (!relaying) deadline.clear();
  }
}

/**
 * An error the attempts' loop answers (no backend left, routing unreachable, a fallback group's
 * limits), saying how many attempts were made, 0 when none: every answer to a routed request
 * carries x-kvgate-attempts, a refusal made before any upstream attempt included, and the 500 of
 * a failure of the gateway's own code (a hook that throws) once the request went out.
 */
function withAttempts(e: unknown, attempts: number): GatewayError {
  const told = asGatewayError(e);
  return new GatewayError(told.status, told.type, told.message, told.code, told.param, { ...told.headers, "x-kvgate-attempts": String(attempts) }, told.extra);
}

/**
 * No group is left for a request or a realtime handshake to try: its last attempt's failure is the
 * answer, as `finalAnswer` tells it; with none, the 503 of the last refusal a group's object gave
 * (`refused`) — routing_unavailable when a shard object of a group could not be asked (its
 * servers unknown), not "every one is failing" — or, when no backend at all was left but one this
 * isolate cannot reach (`passed`), the 500 config_invalid saying so: the one thing to fix.
 */
export function noneLeft(last: Response | null, finalAnswer: (answer: Response) => Response, held: HeldFailure, refused: NoBackendCause, model: string, passed: PassedOver): Response {
  if (last) return finalAnswer(last);
  const cause = held.routingUnreached ? "unreached" : refused;
  throw (cause === "no-backend" ? passed.answer() : null) ?? noBackend(cause, model);
}

/**
 * The event of an attempt that failed and was tried again elsewhere, for a request whose line was
 * sampled: noted when the attempt failed, written when the next one goes out — a request with no
 * backend left to try failed over nowhere.
 */
export class FailoverEvent {
  private failed: { group: string; backend: string; cause: string } | null = null;
  private readonly p: Pick<ProxyInput, "log" | "requestId">;

  constructor(p: Pick<ProxyInput, "log" | "requestId">) {
    this.p = p;
  }

  failedOn(group: string, backend: string, cause: string): void {
    this.failed = { group, backend, cause };
  }

  /** Attempt `n` goes out. */
  attempting(n: number): void {
    if (this.failed && this.p.log) logEvent("failover", "warn", { request_id: this.p.requestId, ...this.failed, next_attempt: n });
    this.failed = null;
  }
}

/**
 * What the routing object checks for the request's virtual key (null for the master key), after
 * the key's own rules: a key limited to some models gets a 404 for any other, and one whose only
 * budget is in dollars a 403 for a model whose group has no pricing to count them by.
 */
export function tenantFor(caller: Caller, model: string, group: ResolvedGroup): RouteTenant | undefined {
  if (caller.kind === "master") return undefined;
  // Answered as a model that does not exist (as OpenAI does): a key learns nothing of the models outside its list.
  if (!mayCall(caller, model, group)) throw unknownModel(model);
  if (!countsSpendIn(caller.key.record, group)) throw unpricedModel(caller.key.record, model);
  return routeTenant(caller.key, false);
}

/** Whether the caller may call `model` (a name or alias of `group`): the master key any. */
function mayCall(caller: Caller, model: string, group: ResolvedGroup): boolean {
  return caller.kind === "master" || allowsModel(caller.key.record, model, group.name);
}

/**
 * The group serving `model` as the caller may call it, and the fleet it is in, or a 404. A model
 * the isolate's fleet does not name may be a group added since the isolate read it: looked up
 * afresh (at most once a second). One the fleet names in a group the caller's key may not call is
 * looked up afresh too, before its 404: one path for both, so a key cannot tell by the answer's
 * time (a registry read or none) which models outside its list exist.
 */
export async function groupForCaller(env: Env, caller: Caller, model: string, byModel: Map<string, ResolvedGroup>): Promise<{ group: ResolvedGroup; byModel: Map<string, ResolvedGroup> }> {
  const known = byModel.get(model);
  if (known && mayCall(caller, model, known)) return { group: known, byModel };
  const fresh = await freshGroup(env, model);
  if (!fresh || !mayCall(caller, model, fresh.group)) throw unknownModel(model);
  return { group: fresh.group, byModel: fresh.fleet.byModel };
}

/**
 * A fallback group, if the caller may be served by it: a key limited to some models is kept to
 * them (its model's own error instead). Fallback names were checked against the groups when the
 * config loaded; a group removed since is skipped.
 */
export function fallbackFor(caller: Caller, byModel: ReadonlyMap<string, ResolvedGroup>, name: string): ResolvedGroup | undefined {
  const group = byModel.get(name);
  return group && (caller.kind === "master" || allowsGroup(caller.key.record, group)) ? group : undefined;
}

const LIMIT_WORDS: Record<LimitRefusal["limit"], string> = {
  rpm: "its requests per minute",
  tpm: "its tokens per minute",
  parallel: "its requests in flight at once",
  budget: "its budget",
};

/** A 429 for a key over a limit: rate_limit_exceeded, or insufficient_quota for a spent budget, with when to try again. */
export function limitError(d: Pick<LimitRefusal, "limit" | "retryAfterMs">, caller: Caller): GatewayError {
  const prefix = caller.kind === "key" ? `API key ${caller.key.record.prefix}…` : "this key";
  const budget = d.limit === "budget";
  const when = d.retryAfterMs === null ? "; the budget does not renew" : "";
  return overLimit(`${prefix} reached ${LIMIT_WORDS[d.limit]}${budget ? " for the period" : ""}${when}`, budget ? "insufficient_quota" : "rate_limit_exceeded", d.retryAfterMs);
}

/**
 * The groups a request or a realtime handshake may go through: its own, then its fallbacks in
 * order, each as the fleet this isolate last read has it. One rule for both after a refusal.
 */
export class GroupPath {
  primary: ResolvedGroup;
  group: ResolvedGroup;
  private byModel: ReadonlyMap<string, ResolvedGroup>;
  private readonly caller: Caller;
  private readonly model: string;
  private fellBackTo = 0;
  private reread = false;

  constructor(primary: ResolvedGroup, byModel: ReadonlyMap<string, ResolvedGroup>, caller: Caller, model: string) {
    this.primary = this.group = primary;
    this.byModel = byModel;
    this.caller = caller;
    this.model = model;
  }

  /**
   * Every backend of the group that takes requests, as this isolate has it, was tried (`exclude`)
   * or cannot be reached from it (`unreachable`), and no fallback group is left that the caller
   * may use (fallBack would skip the others): a wait before the next attempt would lead to a
   * refusal, and the last answer. The next route call is made all the same, unwaited: a routing
   * object that knows the group newer (a backend added, the model moved) has the request read the
   * fleet and go on.
   */
  nothingLeft(exclude: readonly string[], unreachable: readonly string[]): boolean {
    return !anyUntried(this.group.deployments, exclude, unreachable) && !this.primary.fallbacks.slice(this.fellBackTo).some((name) => fallbackFor(this.caller, this.byModel, name));
  }

  /**
   * Where to go after the group's object refused: "again" into the group as the registry now has
   * it, when the object knows it newer than this isolate (its servers drained, replaced; the
   * refusal stands when the registry cannot be reached); "fallback" into the next fallback group
   * the caller may use; null when none is left.
   */
  async afterRefusal(env: Env, refusal: { rev: number }): Promise<"again" | "fallback" | null> {
    if (refusal.rev > this.group.rev && !this.reread && (await this.readAgain(env, refusal.rev)) === "current") return "again";
    return this.fallBack() ? "fallback" : null;
  }

  /** Into the next fallback group the caller may use; false when none is left. */
  fallBack(): boolean {
    let next: ResolvedGroup | undefined;
    while (!next && this.fellBackTo < this.primary.fallbacks.length) next = fallbackFor(this.caller, this.byModel, this.primary.fallbacks[this.fellBackTo++] as string);
    if (!next) return false;
    this.group = next;
    return true;
  }

  /**
   * A backend picked by an object that knows the group newer than this isolate: the admin API's
   * "applied" holds for this request too. "go": on, with `group` as the registry now has it (or as
   * the isolate had it, when the registry cannot be reached); "again": the model now names another
   * group, or the backend picked changed (its model name, key, headers, weight, cap…), so its
   * lease went back with no verdict on it and the request routes again through `group`. A fallback
   * group the caller may no longer use as it now is (fallbackFor) is passed over the same way, to
   * the next; null when none is left, its lease given back: the request ends as after a refusal
   * with none left (noneLeft), with the failure met before it came to that fallback.
   * Costs nothing while the isolate is current: the requests that meet a change before their
   * isolate holds it read the fleet (most often one), none while the registry could not be read
   * within the second before (workers/fleet.ts fleetAtLeast).
   */
  async afterDecision(p: Pick<ProxyInput, "env" | "ctx" | "config">, decision: Routed): Promise<"go" | "again" | null> {
    if (decision.rev <= this.group.rev || this.reread) return "go";
    const routed = this.group;
    let next: "go" | "again" | null;
    try {
      const read = await this.readAgain(p.env, decision.rev);
      if (read === "refused") next = this.fallBack() ? "again" : null;
      else next = read === "current" && (this.group.name !== routed.name || !sameDeployment(routed, this.group, decision.backendId)) ? "again" : "go";
    } catch (e) {
      giveBack(decision, routed, p.env, p.ctx, p.config.releaseFlushMs);
      throw e;
    }
    if (next !== "go") giveBack(decision, routed, p.env, p.ctx, p.config.releaseFlushMs);
    return next;
  }

  /**
   * Reads the fleet again, once a request; "current" when `group` is now the registry's. The
   * request's own group is found again by the model the client named, not by the group's name: a
   * group removed may have handed that name to another (which the caller must be allowed, as
   * tenantFor says), and one that no group has any more is a 404. A fallback group as it now is
   * is checked as fallBack checks one (fallbackFor: its names, its pricing for a budget in dollars
   * alone): "refused" when the caller may no longer use it, `group` left as it was. "stale" when
   * the registry cannot be reached, or a fallback group is gone.
   */
  private async readAgain(env: Env, rev: number): Promise<"current" | "refused" | "stale"> {
    this.reread = true;
    const fresh = await fleetAtLeast(env, rev);
    if (!fresh) return "stale";
    this.byModel = fresh.byModel;
    const own = this.group === this.primary;
    const now = fresh.byModel.get(own ? this.model : this.group.name);
    if (!now && own) throw unknownModel(this.model);
    if (!now) return "stale";
    if (own) {
      tenantFor(this.caller, this.model, now);
      this.primary = now;
    } else if (fallbackFor(this.caller, fresh.byModel, now.name) !== now) return "refused";
    this.group = now;
    return "current";
  }
}

/** Deployment `id` alike in two versions of a group (absent from both counts as alike). */
function sameDeployment(a: ResolvedGroup, b: ResolvedGroup, id: string): boolean {
  const of = (g: ResolvedGroup) => canonicalJson(g.deployments.find((d) => d.id === id) ?? null);
  return of(a) === of(b);
}

export function unknownModel(model: string): GatewayError {
  return notFound(`The model ${quoted(model)} does not exist or you do not have access to it (GET /v1/models lists the models you can use)`, "model_not_found");
}

/** A client's model name as an error quotes it: no longer than a group's name can be. */
function quoted(model: string): string {
  return model.length <= NAME_MAX ? `"${model}"` : `"${clipName(model)}" (${model.length} characters)`;
}

/**
 * The error for an endpoint the model's backends do not serve (every backend tried answered 404
 * for it, none about the model, and none answered: held-failure.ts): the request's, told as a path
 * the gateway does not serve is, so the SDKs raise a NotFoundError and retry nothing.
 */
export function endpointNotServed(model: string, path: string): GatewayError {
  return notFound(`the backends of model ${quoted(model)} do not serve ${path}`, "endpoint_not_served");
}

/**
 * Every backend tried lacked the endpoint or was refused by its proxy, but a group refused with a backend not tried
 * (HeldFailure.untriedRefusal): that refusal is the answer, with the routing headers of the last
 * attempt's; null otherwise.
 */
export function untriedRefusalAnswer(held: HeldFailure, model: string, attempt: Response): Response | null {
  const untried = held.untriedRefusal;
  return untried === undefined ? null : withRoutingHeaders(noBackend(untried, model).toResponse(), attempt);
}

/**
 * A proxy's 403 no second backend of its group confirmed (HeldFailure.answersOwnRefusal): its
 * backend's own (its Access token missing), told as an engine's 401 is — a 502 upstream_auth_error
 * the SDKs retry, the same message — not the 403 with `x-should-retry: false` it was made as.
 */
export function backendsOwnRefusal(refusal: Response): Response {
  const headers = new Headers(refusal.headers);
  headers.delete(SHOULD_RETRY);
  return retold(refusal, { status: 502, headers });
}

/**
 * `res` with the routing headers (x-kvgate-*, x-request-id) of the attempt's answer it replaces;
 * not its x-should-retry, which spoke of that answer (a proxy's 403), not of `res` (a 503 to try again).
 */
function withRoutingHeaders(res: Response, attempt: Response): Response {
  for (const [k, v] of attempt.headers) if (k.startsWith("x-") && k !== SHOULD_RETRY) res.headers.set(k, v);
  return res;
}

/**
 * The error for a model none of whose groups (its own, its fallbacks) had a backend to give; one
 * a shard object of which could not be asked is told so (NoBackendCause).
 */
export function noBackend(refused: NoBackendCause, model: string): GatewayError {
  if (refused === "unreached") return routingUnavailable(model);
  return refused === "at-capacity"
    ? unavailable(`every backend of model "${model}" is at its in-flight limit`)
    : unavailable(`no healthy backend for model "${model}": every one is failing or its circuit is open`);
}
