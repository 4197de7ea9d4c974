import { GatewayError } from "../../src/openai/errors.ts";
import type { LeaseOutcome } from "../../src/routing/protocol.ts";
import { isServerSide, type Failure } from "../../src/upstream/retry.ts";
import type { AttemptEnd, HeldLease } from "./route-client.ts";

/**
 * Whose a failed attempt's failure was, for a request (proxy.ts) and a realtime handshake
 * (realtime.ts) alike. A server-side failure on one backend (a 5xx-class answer, no answer in
 * time) says nothing yet, so its lease is held until the next attempt tells: if another backend
 * answers, the failure was its backend's; if a second backend fails the same way, the failure
 * follows the request (a body every server crashes on, an endpoint no engine of the group serves),
 * and neither backend is charged with it — one client cannot open every breaker of a group. Any
 * other failure is settled at once.
 */
export class HeldFailure {
  private held: HeldLease | null = null;
  private bothUnserved = false;
  /** Two backends failed server-side in different ways (a 404 for the endpoint, a crash): another backend serves the endpoint. */
  private differed = false;
  /** What the held attempt told of itself (a timeout with no answer) and what it met, sent with its settling whatever the verdict. */
  private heldEnd: AttemptEnd | undefined;

  /** The routing object whose backend's failure is held: the next attempt goes to another shard first (route-client.ts route). */
  get heldOn(): string | undefined {
    return this.held?.object;
  }

  /** The last failure followed the request, a 404 for the endpoint on both backends: the request asks for what the group does not serve. */
  get unserved(): boolean {
    return this.bothUnserved;
  }

  /**
   * A failed attempt's lease and what its failure says about the backend. True when the failure
   * follows the request: both leases are settled as the request's, and no other backend is tried.
   */
  failed(lease: HeldLease, verdict: LeaseOutcome, failure: Failure, end?: AttemptEnd): boolean {
    const met: AttemptEnd | undefined = failure.kind === undefined ? end : { ...end, failure: failure.kind };
    // Of this failure only: a request gone on to a fallback group after one confirmed is judged afresh.
    this.bothUnserved = false;
    if (verdict !== "upstream-error" || !isServerSide(failure)) {
      // A backend that asked for a wait is spared for it (src/routing/group-router.ts).
      lease.settle(verdict, verdict === "rate-limited" && failure.retryAfterMs !== null ? { ...met, retryAfterMs: failure.retryAfterMs } : met);
      // One the gateway's own limit cut (the request's deadline, a generation's bound) told nothing of the failure held.
      if (verdict === "client-abort") this.cut();
      return false;
    }
    if (this.held !== null && isUnserved(met) === isUnserved(this.heldEnd)) {
      this.bothUnserved = isUnserved(met);
      lease.settle("rejected", met);
      this.settle("rejected");
      return true;
    }
    // Another kind of failure does not confirm the one held, which is then its backend's: a crash
    // after a 404 for the endpoint shows another backend serves it; a 404 after a crash tells
    // nothing of the crash, charged as with no second attempt.
    if (this.held !== null) this.differed = true;
    this.settle("upstream-error");
    this.held = lease;
    this.heldEnd = met;
    return false;
  }

  /**
   * Another backend answered: the failure before was its backend's. A rejection says the request
   * itself was bad, which a server may well have crashed on.
   */
  answered(rejected: boolean): void {
    this.settle(rejected ? "rejected" : "upstream-error");
  }

  /**
   * Whatever ended the attempts: a failure nobody confirmed is its backend's, as it would be alone —
   * but a 404 for the endpoint, which no other backend answered or failed otherwise on: a group's
   * only backend (or its only one not open or full) lacking an endpoint is what any client may ask
   * of it, and charged, the SDK's tries would open its breaker for every other client. After
   * another backend's crash, which shows that backend serves the endpoint, the 404 is its own.
   */
  end(): void {
    this.settle(isUnserved(this.heldEnd) && !this.differed ? "rejected" : "upstream-error");
  }

  /**
   * The attempt that would have told whose the held failure was could not: the client left, or the
   * gateway cut it or failed itself. No verdict; the routing object still judges a timeout's silence
   * by what the backend served meanwhile (src/routing/silence.ts).
   */
  cut(): void {
    this.settle("client-abort");
  }

  /**
   * What was thrown ended the attempts: the client leaving (a 499) or the gateway's own failure (an
   * error it did not mean to answer, its routing unreachable, its configuration unusable) cut them
   * (cut); a refusal the gateway answers (a fallback group's object refusing the key over its
   * limits, no backend left) leaves the held failure to end(), as any end of the attempts without
   * another backend's word does.
   */
  thrown(e: unknown): void {
    if (!(e instanceof GatewayError) || e.status === 499 || GATEWAYS_OWN.has(String(e.code))) this.cut();
  }

  private settle(outcome: LeaseOutcome): void {
    this.held?.settle(outcome, this.heldEnd);
    this.held = null;
    this.heldEnd = undefined;
  }
}

/** The codes of the gateway's own failures among the errors it answers. */
const GATEWAYS_OWN: ReadonlySet<string> = new Set(["routing_unavailable", "config_invalid"]);

/**
 * A held failure that was a 404 for the endpoint (src/upstream/answer.ts "no-endpoint"): the only
 * held one of kind not-served, a model the backend does not serve being its own, never held.
 */
function isUnserved(end: AttemptEnd | undefined): boolean {
  return end?.failure === "not-served";
}
