import type { ResolvedGroup } from "../../src/config/load.ts";
import { reachOf } from "../../src/config/upstream-access.ts";
import { querySteeringRefusal } from "../../src/openai/engine-steering.ts";
import { badRequest, clientGone, GatewayError, methodNotAllowed, SHOULD_RETRY, unavailable } from "../../src/openai/errors.ts";
import { POLICY_VIOLATION } from "../../src/realtime/closing.ts";
import { chosenProtocol, handshakeFault, isWebSocketUpgrade, keyFromProtocols, protocolsWithoutKey } from "../../src/realtime/handshake.ts";
import { sessionIntent } from "../../src/realtime/session-model.ts";
import type { RouteTenant, TokenUsage } from "../../src/routing/protocol.ts";
import { msToNextPeriod } from "../../src/tenants/ledger.ts";
import type { KeyRecord } from "../../src/tenants/protocol.ts";
import { allowsModel, countsSpendIn, keyBudget, listsGroup, readsUsage, unpricedModel } from "../../src/tenants/route-tenant.ts";
import { isFailover, OwnTime, routeReason, routingHeaders } from "./attempt.ts";
import { misconfigured, PassedOver } from "./group-reach.ts";
import { WINDOW_MS } from "../../src/tenants/window.ts";
import { HeldFailure } from "./held-failure.ts";
import { afterFailure, noRetry } from "./after-failure.ts";
import { backendsOwnRefusal, FailoverEvent, groupForCaller, GroupPath, limitError, noneLeft, tenantFor, unknownModel, untriedRefusalAnswer, type ProxyInput } from "./proxy.ts";
import { openUpstream, type Handshake } from "./realtime-handshake.ts";
import { engineRequestId } from "./request-id.ts";
import { holdLease, refusalCause, route, type HeldLease, type NoBackendCause } from "./route-client.ts";
import { closeUnused, relaySockets, type Relay } from "./socket-relay.ts";
import { originRefusal } from "./admit.ts";
import { recheckKey, type Caller } from "./auth.ts";
import { sessionModels } from "../fleet.ts";
import type { Prompt } from "./validate.ts";

export type RealtimeInput = Omit<ProxyInput, "endpoint">;

const PATH = "/v1/realtime";
/** A session's prompt is not known at the handshake: it is routed by load alone. */
const NO_PROMPT: Prompt = { chain: [], blocks: 0 };

/**
 * GET /v1/realtime?model=M, a WebSocket: routed by the model's group like any request (with no
 * prompt to match, by load), the upstream's socket opened with the deployment's model, reached
 * as a request to it is (its binding, key and extra headers), and the two sockets relayed for as
 * long as both stay open. The backend's slot is held for the socket's life — renewed as every
 * held lease is — and released when either side closes. Before the upstream accepted (a refused
 * connection, no answer in time, a 5xx or 429), the handshake fails over to the next backend, then
 * to the fallback groups, as a request does, and a failure that follows it is its own, as a
 * request's is.
 */
export async function openRealtime(p: RealtimeInput): Promise<Response> {
  const { req, config } = p;
  if (req.method !== "GET") throw methodNotAllowed(PATH, "GET");
  if (!isWebSocketUpgrade(req.headers)) {
    // No Upgrade header on the 426: the runtime drops it from any answer but a 101.
    throw new GatewayError(426, "invalid_request_error", `${PATH} is a WebSocket: connect with Upgrade: websocket`, "upgrade_required");
  }
  const fault = handshakeFault(req.headers);
  if (fault === "no-key") throw badRequest("the WebSocket handshake has no Sec-WebSocket-Key", null, "invalid_websocket_handshake");
  if (fault === "version") {
    throw new GatewayError(426, "invalid_request_error", "the gateway speaks WebSocket version 13 only: send Sec-WebSocket-Version: 13", "unsupported_websocket_version", null, { "sec-websocket-version": "13" });
  }
  const url = new URL(req.url);
  const model = url.searchParams.get("model");
  if (!model) throw badRequest(`model is required: connect to ${PATH}?model=<model>`, "model", "missing_required_parameter");
  p.log?.asked(model, false);
  // The query reaches the engine as it came, but for its model (realtime-handshake.ts): from a
  // virtual key, held to what a body is (engine-steering.ts), before anything is routed.
  const steers = p.caller.kind === "master" ? null : querySteeringRefusal(url.searchParams);
  if (steers) throw steers;
  const { group: primary, byModel } = await groupForCaller(p.env, p.caller, model, config.byModel);
  const tenant = tenantFor(p.caller, model, primary);
  const offered = req.headers.get("sec-websocket-protocol");
  const protocols = protocolsWithoutKey(offered);
  // The client must get back one of the subprotocols it offered, and never the key.
  if (protocols.length === 0 && keyFromProtocols(offered) !== null) {
    throw badRequest("the WebSocket subprotocols hold only the API key: offer the protocol too (e.g. 'realtime')", null, "invalid_subprotocol");
  }

  const held = new HeldFailure();
  try {
    return await handshakeInTurn(p, { model, search: url.search, tenant, protocols, primary, byModel }, held);
  } catch (e) {
    held.thrown(e);
    throw e;
  } finally {
    held.end();
  }
}

/** What every backend a session tries is asked with, and the groups it may try. */
interface Session {
  model: string;
  /** The client's query string, passed on (realtime-handshake.ts). */
  search: string;
  tenant: RouteTenant | undefined;
  /** The subprotocols the client offered, the key taken out. */
  protocols: readonly string[];
  primary: ResolvedGroup;
  /** The fleet the primary group was found in: where its fallback groups are looked up. */
  byModel: ReadonlyMap<string, ResolvedGroup>;
}

/**
 * Tries the groups' backends in turn until one accepts the handshake, as a request's attempts
 * go: a failure is settled as the backend's, or held until the next attempt tells whose it was
 * (held-failure.ts), and one that follows the request ends the turn. A group refused by an object
 * that knows it newer than this isolate is read again and tried once more, as a request's is.
 */
async function handshakeInTurn(p: RealtimeInput, s: Session, held: HeldFailure): Promise<Response> {
  const { req, config } = p;
  const { model, tenant, protocols } = s;
  let { primary } = s;
  // The master key owns the deployment: its answers name backends by id, a virtual key's by group (attempt.ts routingHeaders, backendAsSeen).
  const owner = p.caller.kind === "master";
  const path = new GroupPath(primary, s.byModel, p.caller, model);
  let attempts = 0;
  // A group has given the session a backend: its key's request is counted there, once (RouteTenant.counted).
  let counted = false;
  let last: Response | null = null;
  // The cause of the last refusal a group's object gave (proxy.ts noneLeft).
  let refused: NoBackendCause = "no-backend";
  const failover = new FailoverEvent(p);
  const own = new OwnTime(p.startedAt);
  // The deployments this isolate cannot reach: passed over, as a request's are (group-reach.ts).
  const passed = new PassedOver(p.env, config.gatewayKeys, p.log, owner);
  // Every backend tried lacks a realtime endpoint (held-failure.ts): a client that tries again meets
  // the same — unless a group could not be tried, whose refusal stands (proxy.ts).
  const finalAnswer = (answer: Response): Response => {
    const refused = untriedRefusalAnswer(held, model, answer);
    if (refused) return refused;
    if (held.unserved) answer.headers.set(SHOULD_RETRY, "false");
    // A proxy's 403 no second backend confirmed: its backend's own, a 502 to retry (proxy.ts).
    return held.answersOwnRefusal ? backendsOwnRefusal(answer) : answer;
  };
  let group = primary;
  for (;;) {
    const exclude: string[] = [];
    // Each group's object keeps the key's limits for its own sessions: a fallback group checks them too.
    let admitted = false;
    for (;;) {
      const here = passed.entering(group);
      const decision = await route(p.env, p.ctx, group, NO_PROMPT, exclude, model, tenant && { ...tenant, admitted, counted }, isFailover(attempts + 1, group !== primary), held.heldOn, here.unreachable, passed.countedBy);
      if ("refused" in decision && decision.refused === "limited") throw limitError(decision, p.caller);
      if ("refused" in decision) {
        refused = decision.refused;
        const refusedBy = group;
        const step = await path.afterRefusal(p.env, decision);
        // Refused by an object that knows the group newer, the group as it is now is tried again.
        if (step !== "again") held.refused(refusalCause(decision), refusedBy, exclude, here.unreachable);
        ({ group, primary } = path);
        if (step === "again" && group.name === refusedBy.name) continue;
        // Another group (a fallback, or the model's as the registry now has it): its own exclusions, and its own object's admission of the key.
        if (step !== null) break;
        return noneLeft(last, finalAnswer, held, refused, model, passed);
      }
      admitted = counted = true;
      const routed = group;
      const next = decision.rev > group.rev ? await path.afterDecision(p, decision) : "go";
      ({ group, primary } = path);
      // A fallback the caller may no longer use, and none left: as after a refusal (proxy.ts).
      if (next === null) return noneLeft(last, finalAnswer, held, refused, model, passed);
      // Another group: its own exclusions, and its own object's admission of the key.
      if (next === "again" && group.name !== routed.name) break;
      if (next === "again") continue;
      // Picked by an object that knows nothing of RouteCall.unreachable: routed again without it, no attempt spent (proxy.ts).
      if (passed.passesOver(decision, routed, group, p.ctx, config.releaseFlushMs)) {
        exclude.push(decision.backendId);
        continue;
      }
      attempts++;
      failover.attempting(attempts);
      held.attempting(group.name, passed.of(group).reachable);
      // The decision's lease, as the group it was routed on has it (proxy.ts).
      const lease = holdLease(decision, routed, p.env, p.ctx, config.releaseFlushMs, tenant?.id);
      // A socket may stay open for hours, with no timer of its own.
      lease.keepRenewed();
      const deployment = group.deployments.find((d) => d.id === decision.backendId);
      if (!deployment) {
        lease.settle("client-abort");
        throw unavailable(`routing for model "${model}" named a backend this gateway does not know`, "routing_unavailable");
      }
      // Reached as a request would be: through its binding, with its key and extra headers. One
      // this isolate cannot reach was passed over above: never here.
      const reach = reachOf(deployment, p.env, config.gatewayKeys);
      if (!reach.ok) {
        lease.settle("client-abort");
        throw misconfigured(deployment, group, owner, reach.problems);
      }
      // The upstream's socket until the relay takes it: what an exception must close.
      let unused: WebSocket | null = null;
      let answer: Handshake;
      try {
        const sentAt = performance.now();
        answer = await openUpstream({ search: s.search, reach, requestId: engineRequestId(p.requestId, p.caller), group, deployment, decision, protocols, clientSignal: req.signal, owner });
        if (answer.kind === "open") unused = answer.socket;
        if (req.signal.aborted) {
          // Nobody is left to relay to: a socket the upstream opened meanwhile is closed at once (below).
          lease.settle("client-abort");
          throw clientGone();
        }
        const headers = routingHeaders(decision, deployment, own.ms(sentAt), p.requestId, attempts, group === primary ? null : group.name, owner);
        p.log?.routed(group.name, deployment.id, routeReason(decision, attempts, group !== primary), decision.matched, decision.total, attempts);
        if (answer.kind === "open") {
          const pair = new WebSocketPair();
          const protocol = chosenProtocol(protocols, answer.protocol);
          if (protocol !== null) headers["sec-websocket-protocol"] = protocol;
          // Made before the relay takes the sockets: an answer the gateway cannot build leaves the upstream's unused.
          const accepted = new Response(null, { status: 101, webSocket: pair[0], headers });
          const { caller } = p;
          // A session nothing moves in, or whose backend owes a response and says nothing, is ended after the group's stall bound, as a stalled stream is.
          const idleMs = group.streamIdleTimeoutMs;
          if (caller.kind === "key") {
            const counts = readsUsage(caller.key.record);
            if (counts) lease.watchLimits(tenant?.budget ?? null, tenant?.tpm ?? null);
            const reported = counts ? (soFar: TokenUsage) => void lease.charge(soFar).then(() => endIfLimited(lease, caller, relay)) : null;
            const relay: Relay = relaySockets(pair[1], answer.socket, lease, { model: deployment.model, reported, idleMs, secrets: reach.secrets, maxEventBytes: config.limits.maxBodyBytes, virtualKey: true, intent: sessionIntent(s.search) });
            watchKey(caller, p, relay, counts ? lease : null, sessionRefusal(p.req, model, primary, group, counts));
          } else relaySockets(pair[1], answer.socket, lease, { model: deployment.model, reported: null, idleMs, secrets: reach.secrets, maxEventBytes: config.limits.maxBodyBytes, virtualKey: false, intent: sessionIntent(s.search) });
          unused = null;
          held.answered(false);
          return accepted;
        }
        for (const [k, v] of Object.entries(headers)) answer.response.headers.set(k, v);
      } catch (e) {
        // What is thrown on purpose settled the lease first. Anything else is the gateway's own
        // failure once the upstream answered (a response header the runtime cannot build): no
        // verdict on the backend, and nothing of the handshake may outlive it — not its lease,
        // which keepRenewed would renew for the isolate's life, nor a socket the upstream opened.
        lease.settle("client-abort");
        if (unused) closeUnused(unused);
        throw e;
      }
      if (answer.kind === "rejected") {
        lease.settle("rejected");
        held.answered(true);
        return answer.response;
      }
      last = answer.response;
      if (answer.failure.kind !== undefined) p.log?.failed(group.name, deployment.id, answer.failure.kind);
      const followsRequest = held.failed(lease, answer.verdict, answer.failure, answer.end);
      // As a request's (proxy.ts): a client that tries again sends it to two more backends to fail on.
      if (noRetry(held, followsRequest, true, answer.verdict, answer.failure)) last.headers.set(SHOULD_RETRY, "false");
      // As a request's (after-failure.ts): the group's next backend — after two proxies' 502s alike
      // too, as two engines dead behind them give, which idle beside open sessions are the backends
      // least-loaded tries first —, then a fallback group.
      const then = afterFailure(held, followsRequest, true, primary.failover, attempts, answer.failure, Infinity);
      if (then.kind === "answer" || (then.kind === "fall-back" && !path.fallBack())) return finalAnswer(last);
      failover.failedOn(group.name, deployment.id, answer.failure.cause);
      if (then.kind === "fall-back") {
        ({ group, primary } = path);
        own.routingAgain();
        break;
      }
      exclude.push(deployment.id);
      if (then.waitMs > 0 && !path.nothingLeft(exclude, passed.of(group).unreachable)) await new Promise((r) => setTimeout(r, then.waitMs));
      own.routingAgain();
    }
  }
}

/**
 * Ends a session whose key's budget is spent, or whose key's tpm is reached, as the routing object
 * answered a renewal of its lease: closed with 1008, the client told what a request with the key
 * would be (its 429's message: insufficient_quota, rate_limit_exceeded). Its tokens are charged as
 * the backend reports them (each output's end — a response.done, a transcription.done —, with the
 * lease's renewal): a session lasts hours, and charged only at its end it overshot the budget by
 * all of them; and its tokens fill the minute's window, held only at its opening, it spent any
 * number a minute while its key's requests were refused. The output that crosses either is
 * served, as a request's is.
 */
function endIfLimited(lease: HeldLease, caller: Extract<Caller, { kind: "key" }>, relay: Relay): void {
  const limit = lease.limitReached;
  if (limit === null) return;
  const { budgetPeriod } = caller.key.record;
  const retryAfterMs = limit === "budget" ? msToNextPeriod(budgetPeriod, Date.now()) : WINDOW_MS;
  relay.end({ code: POLICY_VIOLATION, reason: limitError({ limit, retryAfterMs }, caller).message });
}

/**
 * How often an open session's key is checked: a read of the isolate's key cache, which bounds
 * how old what it says may be (workers/gateway/key-cache.ts), so a session ends within about the
 * time a request with its key starts being refused.
 */
const KEY_CHECK_MS = 1000;

/**
 * After a check the tenants object could not answer, how long a session waits before the next:
 * every open session checks its own key, and an outage would else have each ask again every second.
 */
const KEY_CHECK_BACKOFF_MS = 10_000;

/**
 * What refuses a session's key as it now stands (`r`), besides what refuses the key itself: a
 * model list that no longer holds the session's model (asked by `model` of `primary`), or the
 * group that serves it when that is a fallback (proxy.ts tenantFor, fallbackFor), answered as the
 * model's 404 is; a budget in dollars alone on a group without pricing (as the fleet now has the
 * group serving), its 403 model_not_priced (countsSpendIn: the session's tokens would cost it
 * nothing there); origins that no longer hold the page the session was opened from (admit.ts); and,
 * for a session opened while the key counted no usage (`counted` false), the key's counting it now
 * (a budget, a tpm or usage tracking set since): the session's tokens were never read, nor its
 * lease's renewals made to carry them, so it could not be held to the new limit for its hours.
 */
function sessionRefusal(req: Request, model: string, primary: ResolvedGroup, serving: ResolvedGroup, counted: boolean): SessionRefusal {
  return async (r, fleet) => {
    if (!allowsModel(r, model, primary.name) || (serving !== primary && !listsGroup(r, serving))) return unknownModel(model);
    // A budget in dollars alone, where the group serving has no pricing to count them by: what a
    // request there is told (tenantFor), naming that group. The group as the fleet now has it, not
    // as the handshake found it: an operator who drops its pricing leaves the session's tokens
    // costing nothing (its routing object prices them by the group's newest version). The fleet is
    // asked only for such a key: one comparison for another (countsSpendIn, of a group with no pricing).
    if (!countsSpendIn(r, NO_PRICING) && !countsSpendIn(r, asNow(serving, await fleet()))) return unpricedModel(r, serving === primary ? model : serving.name);
    if (!counted && readsUsage(r)) return usageNowCounted(r);
    return originRefusal(r, req);
  };
}

/** What refuses a session's key as it now stands; `fleet` reads the groups (by model name) as the isolate now has them. */
type SessionRefusal = (r: KeyRecord, fleet: () => Promise<ReadonlyMap<string, ResolvedGroup>>) => Promise<GatewayError | null>;

/** A group without pricing: whether a key's spend counts there says whether its budget is in dollars alone. */
const NO_PRICING = {};

/** `group` as `fleet` now has it; as it was, when the fleet no longer holds it under its name. */
function asNow(group: ResolvedGroup, fleet: ReadonlyMap<string, ResolvedGroup>): ResolvedGroup {
  const now = fleet.get(group.name);
  return now?.name === group.name ? now : group;
}

/** Why a session opened counting nothing ends once its key counts usage: the client reconnects, and its new session is counted. */
function usageNowCounted(r: KeyRecord): GatewayError {
  return new GatewayError(409, "invalid_request_error", `API key ${r.prefix}… now counts its usage (a budget, tpm or tracking set since this session opened): reconnect`, "session_outdated");
}

/**
 * Ends a virtual key's session once a request with its key would be refused (revoked, rotated
 * away, expired; its models or origins changed so that `refused` says so): closed with 1008, the
 * client told that refusal's message. A session lives for hours: a leaked key must not keep one
 * after it is revoked, nor a key keep a model or a page taken from it. While the tenants object
 * cannot say (a 503), the session goes on, as it did before the outage, and is checked again less
 * often. `charged`: the lease of a session whose key counts tokens, which sends the key's budget
 * and tpm as they now stand with its renewals, and ends once an object answered one of them that
 * the budget is spent or the tpm reached.
 */
function watchKey(caller: Extract<Caller, { kind: "key" }>, p: RealtimeInput, relay: Relay, charged: HeldLease | null, refused: SessionRefusal): void {
  let checking = false;
  let quietUntil = 0;
  const timer = setInterval(() => {
    if (charged) endIfLimited(charged, caller, relay);
    if (checking || Date.now() < quietUntil) return;
    checking = true;
    recheckKey(caller, p.env, p.ctx)
      .then(async (now) => {
        // The isolate's fleet until it is as old as a key record may be (workers/fleet.ts), its own snapshot while the registry cannot answer.
        const refusal = await refused(now.record, () => sessionModels(p.env, p.ctx, p.config.byModel));
        if (refusal) relay.end({ code: POLICY_VIOLATION, reason: refusal.message });
        else charged?.watchLimits(keyBudget(now), now.record.tpm);
      })
      .catch((e: unknown) => {
        if (e instanceof GatewayError && e.status === 401) relay.end({ code: POLICY_VIOLATION, reason: e.message });
        else quietUntil = Date.now() + KEY_CHECK_BACKOFF_MS;
      })
      .finally(() => (checking = false));
  }, KEY_CHECK_MS);
  relay.onEnd(() => clearInterval(timer));
}
