import { GatewayError } from "../../src/openai/errors.ts";
import type { ResolvedGroup } from "../../src/config/load.ts";
import type { LeaseOutcome } from "../../src/routing/protocol.ts";
import { isServerSide, type Failure } from "../../src/upstream/retry.ts";
import type { AttemptEnd, HeldLease, NoBackendCause } from "./route-client.ts";
import { anyUntried } from "../../src/routing/untried.ts";

const NONE_HELD: readonly string[] = [];

/** An attempt's lease with what it told of itself and what it met, kept for a verdict to come. */
interface Held {
  lease: HeldLease;
  end: AttemptEnd | undefined;
}

/**
 * Whose a failed attempt's failure was, for a request (proxy.ts) and a realtime handshake
 * (realtime.ts) alike. A server-side failure on one backend (a 5xx-class answer, no answer in
 * time) says nothing yet, so its lease is held until the next attempt tells: if another backend
 * answers, the failure was its backend's; if a second backend fails the same way, the failure
 * follows the request (a body every server crashes on), and neither backend is charged with it —
 * one client cannot open every breaker of a group. Any other failure is settled at once.
 *
 * Two backends of one group failing alike are also what two engines dead behind their proxies
 * give (each its proxy's instant 502): least-loaded sends a request to the idle backends first,
 * the dead ones. When both failures were a gateway's 502 or 504 (LeaseRelease.viaGateway), the
 * request goes on to one more backend of the group, within its attempts (awaitsAnotherBackend);
 * a group dead whole behind its proxies serves nothing at all, and where a fallback group remains,
 * the request goes on to it after (awaitsFallback), one step past the attempts' bound if need be.
 * The failures' verdict is held for that word: a backend that serves shows the request passes,
 * and they were their backends' (charged, their breakers open); one failing alike too makes them
 * the request's, and no backend is charged. No such word (the client gone, the attempts spent, no
 * backend or group left), they are the request's. Judged without the third backend, a dead pair
 * was charged only by src/routing/silence.ts, when another backend's answer happened to fall in the
 * milliseconds their 502s took: a share of the requests failed beside healthy backends, and CI
 * once saw a dead engine's breaker still closed after 40 requests from 8 clients.
 *
 * A 404 for the endpoint (one that says nothing of the model; llama.cpp's 501 not_supported_error)
 * is held apart, for the group's own word: it is what any client may ask of a group whose engines
 * lack the endpoint, and a proxy's page for a route it dropped reads the same. The request goes on
 * to the group's other backends (and its fallback groups): one of the group that answers shows the
 * endpoint served, and the 404s were their backends' own; none doing so, they were the request's,
 * and no backend is charged. A failure is no such word, whatever it is: a backend sick behind its
 * proxy (a 502 page, a timeout) says nothing of the path, and counted, would let any client charge
 * the healthy backends that lack it while one is sick.
 *
 * A proxy's refusal (a 403, or another 4xx that is its own page: src/upstream/answer.ts) is held
 * apart alike: a firewall or an ingress in front of the engines (a
 * WAF rule, ModSecurity, an ext_authz policy) refuses a request by what it holds, on every backend
 * behind it, and charged, one client's prompt would open every breaker of the group. A backend of the
 * group that answers shows the request passes: each refusal was its backend's own (its Access token
 * missing). None doing so, the refusals were the request's only when a second backend of the group
 * refused alike, or the group has no other backend taking requests (its only one, or the others
 * resting: its object refused the request with no backend left): no backend is charged, and the
 * client gets the 403 (src/upstream/answer.ts clientError). One refusal no second backend confirmed
 * (failover off, `failover.on` without 5xx, the others busy) is its backend's own, as an engine's
 * 401 is: else a server whose Access token is missing would fail its share of requests, uncharged,
 * forever. An engine's 401 (the gateway's key refused) is its backend's own, settled at once: no
 * request causes it (answer.ts isBackendsOwn).
 */
export class HeldFailure {
  private held: Held | null = null;
  /** The group whose backend's failure is held. */
  private heldIn: string | undefined;
  /** Backends of the group tried last that failed alike: the request's, unless another backend of it (awaitsAnotherBackend) or a fallback group serves it. */
  private alike: Held[] = [];
  /** 404s for the endpoint and refusals met in the group tried now, awaiting its word. */
  private heldForGroup: Held[] = [];
  /** A backend of the group tried now served the request: a 404 for its endpoint, or a refusal, from another is that backend's own. */
  private groupServed = false;
  private group: string | undefined;
  /** The backends of the group tried now that take requests, and how many of them a proxy refused (403). */
  private activeHere = 0;
  private refusedHere = 0;
  /** The groups whose proxies' refusals (403) were the request's: two backends refused alike, or the group's only one taking requests. */
  private readonly requestRefusedIn = new Set<string>();
  /** The last failure met was a proxy's refusal held for its group's word. */
  private lastRefused = false;
  /** The last failure met was a refusal no second backend of its group confirmed (its backend's own), in a group left. */
  private lastRefusalOwn = false;
  /** What the request met so far: 404s for the endpoint, proxies' refusals (403), anything else. */
  private metUnserved = false;
  private metRefused = false;
  private metOther = false;
  /**
   * The refusals of groups with a backend the request could not try for its in-flight limit, or
   * in a shard whose object could not be asked, the first of each group, in the order met: one
   * group's 403s, agreed, say nothing of another's.
   */
  private readonly untried: { refusal: NoBackendCause; group: string }[] = [];

  /**
   * The failure that followed the request was two backends' of the group tried now: a fallback
   * group may serve it, the pair's verdict awaiting its word — even past the attempts' bound, as
   * for a 404 for the endpoint (metOnlyAwaitingGroup): a group dead whole behind its proxies with
   * `maxAttempts: 2` is served by its fallback so.
   */
  get awaitsFallback(): boolean {
    return this.alike.length > 0 && this.heldIn === this.group;
  }

  /**
   * The failure that followed the request was two gateways' 502s or 504s, of the group tried now:
   * another backend of it may serve the request, the pair's verdict awaiting its word.
   */
  get awaitsAnotherBackend(): boolean {
    return this.alike.length === 2 && this.heldIn === this.group && this.alike.every((h) => h.end?.viaGateway === true);
  }

  /** The routing objects whose backends' failures are held: the next attempt goes to another shard first (route-client.ts route). */
  get heldOn(): readonly string[] {
    // Asked of every route call: nothing held, nothing made.
    if (this.held === null && this.alike.length === 0) return NONE_HELD;
    // A pair failed alike awaits another backend's word too (awaitsAnotherBackend): a shard neither failed on tells it best.
    return [...this.alike, ...(this.held ? [this.held] : [])].map((h) => h.lease.object);
  }

  /**
   * Every failure the request met was a 404 for the endpoint, and no backend answered: the
   * request asks for what the groups tried do not serve.
   */
  get unserved(): boolean {
    return this.metOnlyUnserved && this.untried.length === 0;
  }

  /**
   * A group refused the request while a routing object of it, holding a backend not tried, could
   * not be asked: routing, not the backends, left the request unserved.
   */
  get routingUnreached(): boolean {
    return this.untried.some((u) => u.refusal === "unreached");
  }

  /** Every failure the request met was a 404 for the endpoint. */
  get metOnlyUnserved(): boolean {
    return this.metUnserved && !this.metRefused && !this.metOther;
  }

  /**
   * Every failure the request met awaited its group's word (a 404 for the endpoint, a proxy's 403):
   * a fallback group may serve it, even past the attempts' bound — a group whose every backend sits
   * behind a proxy refusing the gateway (an Access token wrong) is served by its fallback, as one
   * gone behind its proxy's 404 page is. The group tried now gives that word: a refusal no second
   * backend confirmed is its backend's own (its Access token missing), and takes no step; one in a
   * group left (charged with it) says nothing of the refusals the groups after it gave alike.
   */
  get metOnlyAwaitingGroup(): boolean {
    return this.metOnlyHeldForGroups && !this.loneRefusalHere;
  }

  /**
   * Every backend tried lacked the endpoint or was refused by its proxy (a 403), but a group refused
   * with a backend not tried: it may serve what the others did not, so that refusal is the answer —
   * one to try again later — not "not served", nor a 403 no second backend of that group gave (one
   * server's Access token missing while the others are busy), nor one another group gave (a fallback
   * group is other servers, behind a proxy of their own). A 403 two backends of that group gave alike
   * (a firewall refusing the prompt) stands: the busy one's would refuse it too.
   */
  get untriedRefusal(): NoBackendCause | undefined {
    if (!this.metOnlyHeldForGroups) return undefined;
    return this.untried.find((u) => !this.requestRefusedIn.has(u.group))?.refusal;
  }

  /**
   * The last failure, the answer the client would get, is a proxy's refusal (403) no second backend
   * of its group confirmed, in a group with others taking requests: its backend's own, answered as
   * an engine's 401 is (a 502 the SDKs retry: proxy.ts backendsOwnRefusal), and charged.
   */
  get answersOwnRefusal(): boolean {
    return this.lastRefused && (this.loneRefusalHere || this.lastRefusalOwn);
  }

  /** Every failure met was held for its group's word: 404s for the endpoint, proxies' 403s. */
  private get metOnlyHeldForGroups(): boolean {
    return (this.metUnserved || this.metRefused) && !this.metOther;
  }

  /** The group tried now holds one refusal (403), and another backend of it takes requests: none confirmed it. */
  private get loneRefusalHere(): boolean {
    return this.refusedHere === 1 && this.activeHere > 1;
  }

  /**
   * `group`'s object refused the request (`tried`: the group's backends it tried). Noted when an
   * active backend of it was not tried for its in-flight limit (or a shard passed the prompt on as
   * the next would serve it sooner). A backend resting (its breaker open) is no sign it serves what
   * the others lacked, beside them or in a fallback group none of which was tried: a server down for
   * hours would turn every such request into a 503 "every one is failing", retried twice.
   *
   * Refused with no backend left right after the one 403 its group gave, the only backend it tried:
   * the others rest, and the group takes requests on that one alone, as a group of one does — the
   * 403 is the request's. Charged, a prompt a firewall refuses would open the last breaker the
   * group has (an SDK's retries each charge it), and a wrong Access token on that backend leaves the
   * group unable to serve either way.
   *
   * `unreached`: a shard of the group holding a backend not tried could not be asked (route-client.ts
   * GroupRefusal). Its backends are not resting, only unknown: the refusal is one with backends not
   * tried, whatever the others said — taken for the group's, a lone 403 became the request's (not
   * retried, its backend uncharged) and a lone 404 "not served", for as long as a routing object was out.
   * `unreachable`: the group's backends this isolate cannot reach (workers/gateway/group-reach.ts),
   * passed over, never tried: no backend that could serve what the others did not.
   */
  refused(refusal: NoBackendCause, group: ResolvedGroup, tried: readonly string[], unreachable: readonly string[] = []): void {
    if (refusal === "no-backend") {
      if (group.name === this.group && this.lastRefused && this.refusedHere === 1 && tried.length === 1) {
        this.activeHere = 1;
        this.requestRefusedIn.add(group.name);
      }
      return;
    }
    if (this.untried.some((u) => u.group === group.name)) return;
    if (refusal !== "unreached" && !anyUntried(group.deployments, tried, unreachable)) return;
    this.untried.push({ refusal, group: group.name });
  }

  /**
   * An attempt goes to `group`, `active` of whose backends take requests (those this isolate can
   * reach: one it cannot is no backend of the group here, and says nothing of a refusal). Another group than the
   * last one's (a fallback, or the model's as the registry now has it) has engines of its own: what
   * the group left said alike of the endpoint was the request's, and no verdict on its backends; a
   * refusal none of its backends confirmed was its backend's own.
   */
  attempting(group: string, active: number): void {
    if (this.group !== undefined && group !== this.group) {
      const own = this.loneRefusalHere;
      this.settleHeldForGroup("rejected");
      this.lastRefusalOwn = this.lastRefused && own;
      this.groupServed = false;
      this.refusedHere = 0;
    }
    this.group = group;
    this.activeHere = active;
  }

  /**
   * A failed attempt's lease and what its failure says about the backend. True when the failure
   * follows the request: no other backend is tried, unless the two were gateways' failures in the
   * group tried now (awaitsAnotherBackend) or a fallback group remains (awaitsFallback); the
   * leases are settled as the request's, a group's that no backend asked after serves.
   */
  failed(lease: HeldLease, verdict: LeaseOutcome, failure: Failure, end?: AttemptEnd): boolean {
    const met: AttemptEnd | undefined = failure.kind === undefined ? end : { ...end, failure: failure.kind };
    this.lastRefused = this.lastRefusalOwn = false;
    if (verdict !== "upstream-error" || !isServerSide(failure)) {
      this.metOther = true;
      // A backend that asked for a wait is spared for it (src/routing/group-router.ts).
      lease.settle(verdict, verdict === "rate-limited" && failure.retryAfterMs !== null ? { ...met, retryAfterMs: failure.retryAfterMs } : met);
      // One the gateway's own limit cut (the request's deadline, a generation's bound) told nothing of the failure held.
      if (verdict === "client-abort") this.cut();
      return false;
    }
    if (awaitsGroup(met)) {
      if (isUnserved(met)) this.metUnserved = true;
      else this.metRefused = true;
      // Another backend of the group served the request: this one lacks what the group serves, or its proxy refused the gateway (its token).
      if (this.groupServed) lease.settle("upstream-error", met);
      else {
        this.heldForGroup.push({ lease, end: met });
        if (!isUnserved(met)) {
          this.refusedHere++;
          this.lastRefused = true;
          if (!this.loneRefusalHere && this.group !== undefined) this.requestRefusedIn.add(this.group);
        }
      }
      return false;
    }
    this.metOther = true;
    // A second backend of the group failed alike: the pair awaits another backend's or a fallback
    // group's word (awaitsAnotherBackend, awaitsFallback), the request's at the latest at end().
    // A third of the group failing alike, asked for its word, awaits a fallback group's with them.
    if (this.held !== null && this.heldIn === this.group && this.alike.length === 0) {
      this.alike = [this.held, { lease, end: met }];
      this.held = null;
      return true;
    }
    if (this.awaitsAnotherBackend) {
      this.alike.push({ lease, end: met });
      return true;
    }
    if (this.held !== null || this.alike.length > 0) {
      lease.settle("rejected", met);
      this.settleHeld("rejected");
      this.settleAlike("rejected");
      return true;
    }
    this.held = { lease, end: met };
    this.heldIn = this.group;
    return false;
  }

  /**
   * Another backend answered: the failure before was its backend's. A rejection says the request
   * itself was bad, which a server may well have crashed on; a success, that the group serves the
   * path and lets the request pass (a rejection may be a proxy's: it says nothing of either).
   */
  answered(rejected: boolean): void {
    this.metOther = true;
    if (!rejected) {
      this.groupServed = true;
      this.settleHeldForGroup("upstream-error");
    }
    this.settleHeld(rejected ? "rejected" : "upstream-error");
    this.settleAlike(rejected ? "rejected" : "upstream-error");
  }

  /**
   * Whatever ended the attempts: a failure nobody confirmed is its backend's, as it would be alone;
   * 404s for the endpoint and refusals that no backend of their group contradicted were the
   * request's — a refusal only when a second backend of the group gave it, or none other takes requests.
   */
  end(): void {
    this.settleHeld("upstream-error");
    this.settleHeldForGroup("rejected");
    this.settleAlike("rejected");
  }

  /**
   * The attempt that would have told whose the held failures were could not: the client left, or
   * the gateway cut it or failed itself. No verdict, a timeout's either: a client-abort that says it
   * timed out reads as a non-streamed generation the gateway cut, whose backend the routing object
   * charges when it served nothing while others did (src/routing/silence.ts). A stream's first byte
   * not come while others serve is no such sign (a prompt too long to prefill in time, on a backend
   * the rest of the traffic was steered away from): charged, as silence no health probe undoes, it
   * opened the breaker of the first backend such prompts met.
   */
  cut(): void {
    this.settleHeld("client-abort", noTimeout(this.held?.end));
    this.settleHeldForGroup("client-abort");
    // Two alike were the request's before the fallback was asked: no word from it leaves them so.
    this.settleAlike("rejected");
  }

  /**
   * What was thrown ended the attempts: the client leaving (a 499) or the gateway's own failure (an
   * error it did not mean to answer, its routing unreachable, its configuration unusable) cut them
   * (cut); a refusal the gateway answers (a fallback group's object refusing the key over its
   * limits, no backend left) leaves the held failures to end(), as any end of the attempts without
   * another backend's word does.
   */
  thrown(e: unknown): void {
    if (!(e instanceof GatewayError) || e.status === 499 || GATEWAYS_OWN.has(String(e.code))) this.cut();
  }

  private settleHeld(outcome: LeaseOutcome, end = this.held?.end): void {
    this.held?.lease.settle(outcome, end);
    this.held = null;
  }

  private settleAlike(outcome: LeaseOutcome): void {
    for (const h of this.alike.splice(0)) h.lease.settle(outcome, h.end);
  }

  /** `outcome` for the failures held for the group's word; "rejected" (the request's) leaves a refusal none confirmed its backend's. */
  private settleHeldForGroup(outcome: LeaseOutcome): void {
    const own = outcome === "rejected" && this.loneRefusalHere;
    for (const h of this.heldForGroup.splice(0)) h.lease.settle(own && !isUnserved(h.end) ? "upstream-error" : outcome, h.end);
  }
}

/** The codes of the gateway's own failures among the errors it answers. */
const GATEWAYS_OWN: ReadonlySet<string> = new Set(["routing_unavailable", "config_invalid"]);

/** What an attempt told of itself, but for its timing out: a cut's, which is no verdict (HeldFailure.cut). */
function noTimeout(end: AttemptEnd | undefined): AttemptEnd | undefined {
  if (end?.timedOut === undefined) return end;
  const { timedOut: _, ...rest } = end;
  return rest;
}

/**
 * A failure that was a 404 for the endpoint (src/upstream/answer.ts "no-endpoint"): the only
 * server-side one of kind not-served, a model the backend does not serve being its own, never held.
 */
function isUnserved(end: AttemptEnd | undefined): boolean {
  return end?.failure === "not-served";
}

/**
 * A failure whose verdict is the group's word (a backend of it serving the request): a 404 for the
 * endpoint, a proxy's 403 (kind credentials: an engine's 401, of the same kind, is the backend's
 * own and never held).
 */
function awaitsGroup(end: AttemptEnd | undefined): boolean {
  return isUnserved(end) || end?.failure === "credentials";
}
