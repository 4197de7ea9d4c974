import { describe, expect, it } from "vitest";
import { GatewayError, overLimit, unavailable } from "../../src/openai/errors.ts";
import type { LeaseOutcome } from "../../src/routing/protocol.ts";
import type { Failure } from "../../src/upstream/retry.ts";
import { HeldFailure } from "../../workers/gateway/held-failure.ts";
import type { HeldLease } from "../../workers/gateway/route-client.ts";

/** A lease that records how it was settled (the first settling counts, as a real one's). */
function lease(backendId: string, settled: Map<string, LeaseOutcome>): HeldLease {
  return {
    backendId,
    object: "group",
    renewEveryMs: 1000,
    renewIfDue: () => {},
    keepRenewed: () => {},
    charge: async () => {},
    watchBudget: () => {},
    budgetSpent: false,
    began: () => {},
    settle: (outcome) => void (settled.has(backendId) || settled.set(backendId, outcome)),
  };
}

const crash: Failure = { cause: "5xx", kind: "server-error", retryAfterMs: null };
const noEndpoint: Failure = { cause: "5xx", kind: "not-served", retryAfterMs: null };

/** Two backends fail in turn, then the attempts end: how each was settled. */
function twoFailures(first: Failure, second: Failure): Record<string, LeaseOutcome | undefined> {
  const settled = new Map<string, LeaseOutcome>();
  const held = new HeldFailure();
  const confirmed = [held.failed(lease("a", settled), "upstream-error", first), held.failed(lease("b", settled), "upstream-error", second)];
  held.end();
  return { a: settled.get("a"), b: settled.get("b"), confirmed: confirmed.includes(true) ? "rejected" : undefined };
}

describe("a held failure's verdict", () => {
  it("two 404s for the endpoint, or two crashes, follow the request: neither backend is charged", () => {
    expect(twoFailures(noEndpoint, noEndpoint)).toEqual({ a: "rejected", b: "rejected", confirmed: "rejected" });
    expect(twoFailures(crash, crash)).toEqual({ a: "rejected", b: "rejected", confirmed: "rejected" });
  });

  it("a crash and a 404 for the endpoint, in either order, confirm nothing: each is its backend's (the crashing one serves the endpoint)", () => {
    expect(twoFailures(noEndpoint, crash)).toEqual({ a: "upstream-error", b: "upstream-error", confirmed: undefined });
    expect(twoFailures(crash, noEndpoint)).toEqual({ a: "upstream-error", b: "upstream-error", confirmed: undefined });
  });

  it("a lone 404 for the endpoint, with no other backend to tell, gets no verdict; a lone crash is its backend's", () => {
    for (const [failure, outcome] of [[noEndpoint, "rejected"], [crash, "upstream-error"]] as const) {
      const settled = new Map<string, LeaseOutcome>();
      const held = new HeldFailure();
      held.failed(lease("a", settled), "upstream-error", failure);
      held.end();
      expect(settled.get("a")).toBe(outcome);
    }
  });

  it("a refusal the gateway answers after it (a fallback group's object refusing the key) leaves a held crash its backend's; the client leaving or the gateway failing (its routing unreachable) cuts it", () => {
    const cases: [unknown, LeaseOutcome][] = [
      [overLimit("rpm limit of key k reached", "rate_limit_exceeded", 1000), "upstream-error"],
      [new GatewayError(499, "invalid_request_error", "client disconnected", "client_closed_request"), "client-abort"],
      [new TypeError("a bug"), "client-abort"],
      [unavailable('routing for model "m" is unavailable', "routing_unavailable"), "client-abort"],
    ];
    for (const [thrown, outcome] of cases) {
      const settled = new Map<string, LeaseOutcome>();
      const held = new HeldFailure();
      held.failed(lease("a", settled), "upstream-error", crash);
      held.thrown(thrown);
      held.end();
      expect(settled.get("a")).toBe(outcome);
    }
  });

  it("says a request's failure was an endpoint not served only of the last failure: one after it, on a fallback group, is judged afresh", () => {
    const settled = new Map<string, LeaseOutcome>();
    const held = new HeldFailure();
    held.failed(lease("a", settled), "upstream-error", noEndpoint);
    expect([held.failed(lease("b", settled), "upstream-error", noEndpoint), held.unserved]).toEqual([true, true]);
    held.failed(lease("c", settled), "upstream-error", crash);
    expect(held.unserved).toBe(false);
  });
});
