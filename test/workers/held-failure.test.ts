import { describe, expect, it } from "vitest";
import { GatewayError, overLimit, unavailable } from "../../src/openai/errors.ts";
import type { LeaseOutcome } from "../../src/routing/protocol.ts";
import type { Failure } from "../../src/upstream/retry.ts";
import { HeldFailure } from "../../workers/gateway/held-failure.ts";
import { afterFailure } from "../../workers/gateway/after-failure.ts";
import { SILENT, type AttemptEnd, type HeldLease } from "../../workers/gateway/route-client.ts";

/** A lease that records how it was settled (the first settling counts, as a real one's). */
function lease(backendId: string, settled: Map<string, LeaseOutcome>): HeldLease {
  return {
    backendId,
    object: "group",
    renewEveryMs: 1000,
    renewIfDue: () => {},
    keepRenewed: () => {},
    charge: async () => {},
    watchLimits: () => {},
    limitReached: null,
    began: () => {},
    settle: (outcome) => void (settled.has(backendId) || settled.set(backendId, outcome)),
  };
}

const crash: Failure = { cause: "5xx", kind: "server-error", retryAfterMs: null };
const noEndpoint: Failure = { cause: "5xx", kind: "not-served", retryAfterMs: null };
/** A proxy's 403 (src/upstream/answer.ts "refused"). */
const refusal: Failure = { cause: "5xx", kind: "credentials", retryAfterMs: null };
/** An engine's 401: the gateway's key refused, the backend's own (answer.ts isBackendsOwn). */
const keyRefused: Failure = { cause: "5xx", kind: "credentials", retryAfterMs: null, backendsOwn: true };

/** Backends of one group of three fail in turn, then the attempts end: how each was settled, and whether the last failure ended the request. */
function fails(...failures: Failure[]): Record<string, LeaseOutcome | boolean | undefined> {
  return failsIn(3, ...failures);
}

/** As fails, in a group `active` of whose backends take requests. */
function failsIn(active: number, ...failures: Failure[]): Record<string, LeaseOutcome | boolean | undefined> {
  const settled = new Map<string, LeaseOutcome>();
  const held = new HeldFailure();
  let stopped = false;
  failures.forEach((f, i) => {
    held.attempting("group", active);
    stopped = held.failed(lease(String.fromCharCode(97 + i), settled), "upstream-error", f);
  });
  const unserved = held.unserved;
  held.end();
  return { ...Object.fromEntries(failures.map((_, i) => [String.fromCharCode(97 + i), settled.get(String.fromCharCode(97 + i))])), stopped, unserved };
}

describe("a held failure's verdict", () => {
  it("two crashes follow the request: neither backend is charged, and no third is tried", () => {
    expect(fails(crash, crash)).toEqual({ a: "rejected", b: "rejected", stopped: true, unserved: false });
  });

  it("404s for the endpoint do not stop the attempts; none of the group contradicting them, they were the request's", () => {
    expect(fails(noEndpoint, noEndpoint, noEndpoint)).toEqual({ a: "rejected", b: "rejected", c: "rejected", stopped: false, unserved: true });
    // A group of one: no verdict either.
    expect(fails(noEndpoint)).toEqual({ a: "rejected", stopped: false, unserved: true });
  });

  it("a failure of another backend is no word on the path (a backend sick behind its proxy says nothing of it): the 404s stay the request's, the crash waits for its own word", () => {
    expect(fails(noEndpoint, crash)).toEqual({ a: "rejected", b: "upstream-error", stopped: false, unserved: false });
    expect(fails(crash, noEndpoint)).toEqual({ a: "upstream-error", b: "rejected", stopped: false, unserved: false });
    expect(fails(noEndpoint, crash, crash)).toEqual({ a: "rejected", b: "rejected", c: "rejected", stopped: true, unserved: false });
  });

  it("another backend's answer makes them their backends' own: two dead behind a proxy's 404 page, the third serving", () => {
    const settled = new Map<string, LeaseOutcome>();
    const held = new HeldFailure();
    for (const id of ["a", "b"]) {
      held.attempting("group", 3);
      expect(held.failed(lease(id, settled), "upstream-error", noEndpoint)).toBe(false);
    }
    held.attempting("group", 3);
    held.answered(false);
    held.end();
    expect([settled.get("a"), settled.get("b"), held.unserved]).toEqual(["upstream-error", "upstream-error", false]);
  });

  it("an engine's 401 is its backend's own, on every backend alike: each charged at once, and the attempts go on", () => {
    expect(fails(keyRefused, keyRefused, keyRefused)).toEqual({ a: "upstream-error", b: "upstream-error", c: "upstream-error", stopped: false, unserved: false });
  });

  it("a proxy's refusals (403) alike: two backends of the group refusing and none answering, they were the request's (a firewall's for what it holds), and say nothing of a crash", () => {
    expect(fails(refusal, refusal, refusal)).toEqual({ a: "rejected", b: "rejected", c: "rejected", stopped: false, unserved: false });
    expect(fails(refusal, crash, refusal)).toEqual({ a: "rejected", b: "upstream-error", c: "rejected", stopped: false, unserved: false });
    expect(fails(crash, refusal, refusal, crash)).toEqual({ a: "rejected", b: "rejected", c: "rejected", d: "rejected", stopped: true, unserved: false });
    // A group of one: no second backend to give it, its one refusal is the request's.
    expect(failsIn(1, refusal)).toEqual({ a: "rejected", stopped: false, unserved: false });
  });

  it("a refusal no second backend of a group of several confirmed is its backend's own (its Access token missing): charged, and answered as one", () => {
    expect(fails(refusal)).toEqual({ a: "upstream-error", stopped: false, unserved: false });
    expect(fails(refusal, crash)).toEqual({ a: "upstream-error", b: "upstream-error", stopped: false, unserved: false });
    expect(fails(noEndpoint, refusal)).toEqual({ a: "rejected", b: "upstream-error", stopped: false, unserved: false });
    const held = new HeldFailure();
    held.attempting("group", 3);
    held.failed(lease("a", new Map()), "upstream-error", refusal);
    expect([held.answersOwnRefusal, held.metOnlyAwaitingGroup]).toEqual([true, false]);
    held.attempting("group", 3);
    held.failed(lease("b", new Map()), "upstream-error", refusal);
    expect([held.answersOwnRefusal, held.metOnlyAwaitingGroup]).toEqual([false, true]);
  });

  it("a refusal none of its group confirmed stays its backend's own in a fallback group, where the request goes on", () => {
    const settled = new Map<string, LeaseOutcome>();
    const held = new HeldFailure();
    held.attempting("primary", 3);
    held.failed(lease("a", settled), "upstream-error", refusal);
    held.attempting("fallback", 1);
    expect([settled.get("a"), held.answersOwnRefusal]).toEqual(["upstream-error", true]);
    held.failed(lease("b", settled), "upstream-error", refusal);
    // The fallback group's own word: its one backend's refusal takes the step on past the bound, whatever the primary's backend did.
    expect(held.metOnlyAwaitingGroup).toBe(true);
    held.end();
    expect([settled.get("b"), held.answersOwnRefusal]).toEqual(["rejected", false]);
  });

  it("refusals a fallback group's backends gave alike take the step past the bound, though a backend of the primary refused alone", () => {
    const held = new HeldFailure();
    held.attempting("primary", 2);
    held.failed(lease("a", new Map()), "upstream-error", refusal);
    for (const id of ["b", "c"]) {
      held.attempting("fallback", 2);
      held.failed(lease(id, new Map()), "upstream-error", refusal);
    }
    expect([held.metOnlyAwaitingGroup, held.answersOwnRefusal]).toEqual([true, false]);
  });

  it("another backend serving makes a refusal its backend's own (its gateway key refused), before the answer or after it", () => {
    const settled = new Map<string, LeaseOutcome>();
    const held = new HeldFailure();
    held.attempting("group", 3);
    held.failed(lease("a", settled), "upstream-error", refusal);
    held.attempting("group", 3);
    held.answered(false);
    held.attempting("group", 3);
    held.failed(lease("b", settled), "upstream-error", refusal);
    held.end();
    expect([settled.get("a"), settled.get("b")]).toEqual(["upstream-error", "upstream-error"]);
  });

  it("a fallback group has engines of its own: the 404s its primary said alike were the request's, whatever the fallback does", () => {
    const settled = new Map<string, LeaseOutcome>();
    const held = new HeldFailure();
    for (const id of ["a", "b"]) {
      held.attempting("primary", 3);
      held.failed(lease(id, settled), "upstream-error", noEndpoint);
    }
    held.attempting("fallback", 3);
    held.answered(false);
    held.end();
    expect([settled.get("a"), settled.get("b")]).toEqual(["rejected", "rejected"]);
  });

  it("two crashes of a group with a fallback left await its word: its backend serving makes them their backends' (a group dead behind its proxies); failing alike, or a 4xx, the request's", () => {
    // What the fallback's attempt does, and how the primary's pair and its own lease were settled.
    const after: [string, (held: HeldFailure, settled: Map<string, LeaseOutcome>) => void, (LeaseOutcome | undefined)[]][] = [
      ["serves", (held) => held.answered(false), ["upstream-error", "upstream-error", undefined]],
      ["fails alike", (held, settled) => expect([held.failed(lease("c", settled), "upstream-error", crash), held.awaitsFallback]).toEqual([true, false]), ["rejected", "rejected", "rejected"]],
      ["rejects the request", (held) => held.answered(true), ["rejected", "rejected", undefined]],
      // The client gone, the gateway failing, or the fallback's object refusing: no word, and they stay the request's.
      ["is cut", (held) => held.thrown(new TypeError("a bug")), ["rejected", "rejected", undefined]],
      ["is never made", () => {}, ["rejected", "rejected", undefined]],
    ];
    for (const [what, fallback, outcomes] of after) {
      const settled = new Map<string, LeaseOutcome>();
      const held = new HeldFailure();
      held.attempting("primary", 3);
      expect(held.failed(lease("a", settled), "upstream-error", crash)).toBe(false);
      held.attempting("primary", 3);
      expect([held.failed(lease("b", settled), "upstream-error", crash), held.awaitsFallback]).toEqual([true, true]);
      // Nothing settled before the fallback's word.
      expect(settled.size).toBe(0);
      held.attempting("fallback", 2);
      expect(held.awaitsFallback).toBe(false);
      fallback(held, settled);
      held.end();
      expect([what, ...["a", "b", "c"].map((id) => settled.get(id))]).toEqual([what, ...outcomes]);
    }
  });

  it("two proxies' 502s alike await one more backend of the group: its serving charges them, its failing alike too leaves them the request's but for a fallback group's word", () => {
    const proxy502 = { viaGateway: true as const };
    const after: [string, (held: HeldFailure, settled: Map<string, LeaseOutcome>) => void, (LeaseOutcome | undefined)[]][] = [
      ["serves", (held) => held.answered(false), ["upstream-error", "upstream-error", undefined]],
      ["fails alike", (held, settled) => expect([held.failed(lease("c", settled), "upstream-error", crash, proxy502), held.awaitsAnotherBackend, held.awaitsFallback]).toEqual([true, false, true]), ["rejected", "rejected", "rejected"]],
      ["rejects the request", (held) => held.answered(true), ["rejected", "rejected", undefined]],
      ["is never made", () => {}, ["rejected", "rejected", undefined]],
    ];
    for (const [what, third, outcomes] of after) {
      const settled = new Map<string, LeaseOutcome>();
      const held = new HeldFailure();
      held.attempting("group", 4);
      expect(held.failed(lease("a", settled), "upstream-error", crash, proxy502)).toBe(false);
      held.attempting("group", 4);
      expect([held.failed(lease("b", settled), "upstream-error", crash, proxy502), held.awaitsAnotherBackend]).toEqual([true, true]);
      expect(settled.size).toBe(0);
      held.attempting("group", 4);
      third(held, settled);
      held.end();
      expect([what, ...["a", "b", "c"].map((id) => settled.get(id))]).toEqual([what, ...outcomes]);
    }
    // An engine's own 500s alike (no proxy's word) are the request's at once: no third backend is asked.
    const held = new HeldFailure();
    held.attempting("group", 4);
    held.failed(lease("a", new Map()), "upstream-error", crash);
    held.attempting("group", 4);
    expect([held.failed(lease("b", new Map()), "upstream-error", crash, proxy502), held.awaitsAnotherBackend]).toEqual([true, false]);
  });

  it("after two proxies' 502s alike the attempts go on to the group's next backend within maxAttempts, a request's and a handshake's alike (after-failure.ts); an engine's 500s alike, to a fallback group only", () => {
    const policy = { maxAttempts: 3, on: ["5xx" as const], backoffMs: 0, backoffMaxMs: 0, retryAfterCapMs: 0 };
    /** What comes after each of `n` backends of a group of four failed with `end`: the last's, the one after `n - 1`'s (`retryable`). */
    const after = (n: number, end: AttemptEnd | undefined, retryable = true, maxAttempts = 3) => {
      const held = new HeldFailure();
      let then = "";
      for (let i = 0; i < n; i++) {
        held.attempting("group", 4);
        const follows = held.failed(lease(String(i), new Map()), "upstream-error", crash, end);
        then = afterFailure(held, follows, retryable, { ...policy, maxAttempts }, i + 1, crash, Infinity).kind;
      }
      return then;
    };
    const proxy502 = { viaGateway: true as const };
    expect([after(1, proxy502), after(2, proxy502), after(3, proxy502)]).toEqual(["retry", "retry", "fall-back"]);
    // Past the attempts' bound, the fallback group is the one step left, as for an engine's 500s alike.
    expect([after(2, proxy502, true, 2), after(2, undefined), after(2, undefined, true, 2)]).toEqual(["fall-back", "fall-back", "fall-back"]);
    // A failure the gateway does not try again (a generation cut at its limit) goes nowhere.
    expect(after(1, undefined, false)).toBe("answer");
  });

  it("a crash in a group and one in its fallback are alike: the request's, and no later fallback is asked", () => {
    const settled = new Map<string, LeaseOutcome>();
    const held = new HeldFailure();
    held.attempting("primary", 1);
    expect(held.failed(lease("a", settled), "upstream-error", crash)).toBe(false);
    held.attempting("fallback", 2);
    expect([held.failed(lease("b", settled), "upstream-error", crash), held.awaitsFallback]).toEqual([true, false]);
    held.end();
    expect([settled.get("a"), settled.get("b")]).toEqual(["rejected", "rejected"]);
  });

  it("a refusal the gateway answers after them (a fallback group's object refusing the key) leaves a held crash its backend's; the client leaving or the gateway failing (its routing unreachable) cuts it", () => {
    const cases: [unknown, LeaseOutcome][] = [
      [overLimit("rpm limit of key k reached", "rate_limit_exceeded", 1000), "upstream-error"],
      [new GatewayError(499, "invalid_request_error", "client disconnected", "client_closed_request"), "client-abort"],
      [new TypeError("a bug"), "client-abort"],
      [unavailable('routing for model "m" is unavailable', "routing_unavailable"), "client-abort"],
    ];
    for (const [thrown, outcome] of cases) {
      const settled = new Map<string, LeaseOutcome>();
      const held = new HeldFailure();
      held.attempting("group", 3);
      held.failed(lease("a", settled), "upstream-error", crash);
      held.thrown(thrown);
      held.end();
      expect(settled.get("a")).toBe(outcome);
    }
  });

  it("a first byte's timeout held, then cut, goes back with no verdict: not as a timed-out cut, whose backend the routing object charges when others served meanwhile", () => {
    const settled: [LeaseOutcome, AttemptEnd | undefined][] = [];
    const held = new HeldFailure();
    held.attempting("group", 3);
    held.failed({ ...lease("a", new Map()), settle: (outcome, end) => void settled.push([outcome, end]) }, "upstream-error", { cause: "timeout", kind: "timeout", retryAfterMs: null }, SILENT);
    held.cut();
    held.end();
    // What it met still counts among the attempts' failures.
    expect(settled).toEqual([["client-abort", { failure: "timeout" }]]);
  });

  it("says the request met only 404s for the endpoint of everything it met: a failure of another kind after them says otherwise", () => {
    const held = new HeldFailure();
    const settled = new Map<string, LeaseOutcome>();
    held.attempting("group", 3);
    held.failed(lease("a", settled), "upstream-error", noEndpoint);
    expect(held.unserved).toBe(true);
    held.attempting("fallback", 3);
    held.failed(lease("b", settled), "upstream-error", crash);
    expect(held.unserved).toBe(false);
  });
});
