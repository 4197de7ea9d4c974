import { describe, expect, it } from "vitest";
import { Breaker, type BreakerParams } from "../../src/routing/breaker.ts";

const params: BreakerParams = {
  consecutiveFailures: 3,
  failureRate: 0.5,
  minRequests: 10,
  windowMs: 10_000,
  openMs: 1_000,
  halfOpenRequests: 2,
  closeAfterSuccesses: 2,
};

/** Sends one request through the breaker at `now` and records its outcome. */
function request(b: Breaker, now: number, good: boolean): boolean {
  if (!b.admits(now)) return false;
  b.record(good, now, b.sent());
  return true;
}

describe("Breaker", () => {
  it("opens after consecutive failures; a success in between resets the run", () => {
    const b = new Breaker(params);
    request(b, 1, false);
    request(b, 2, false);
    request(b, 3, true);
    request(b, 4, false);
    request(b, 5, false);
    expect(b.state).toBe("closed");
    request(b, 6, false);
    expect(b.state).toBe("open");
    expect(b.since).toBe(6);
    expect(b.admits(500)).toBe(false);
  });

  it("opens on the failure rate over the window once enough requests ended in it", () => {
    const b = new Breaker(params);
    // Alternating good and bad: never 3 failures in a row, but half of 10 failed.
    for (let i = 0; i < 9; i++) request(b, 100 + i, i % 2 === 0);
    expect(b.state).toBe("closed");
    request(b, 110, false);
    expect(b.state).toBe("open");
  });

  it("forgets failures older than the window", () => {
    const b = new Breaker(params);
    for (let i = 0; i < 8; i++) request(b, i, i % 2 === 0);
    // Eleven seconds later those eight have left the window: two new outcomes are not ten.
    request(b, 11_000, false);
    request(b, 11_001, true);
    request(b, 11_002, false);
    expect(b.state).toBe("closed");
  });

  it("half-opens after openMs with a trial budget; good trials close it", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    request(b, 0, false);
    expect(b.state).toBe("open");
    expect(b.admits(999)).toBe(false);
    expect(b.admits(1_000)).toBe(true);
    expect(b.state).toBe("half-open");
    const t1 = b.sent();
    expect(b.admits(1_001)).toBe(true);
    const t2 = b.sent();
    // Two trials in flight: the budget is spent.
    expect(b.admits(1_002)).toBe(false);
    expect([t1, t2]).toEqual([true, true]);
    b.record(true, 1_010, t1);
    expect(b.state).toBe("half-open");
    b.record(true, 1_020, t2);
    expect(b.state).toBe("closed");
    expect(b.opened).toBe(1);
  });

  it("opens again on a failed trial, and a request sent before it opened has no say", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    request(b, 0, false);
    b.admits(1_000);
    const trial = b.sent();
    // A request from before, ending now, is not a trial: it changes nothing.
    b.record(false, 1_001, false);
    expect(b.state).toBe("half-open");
    b.record(false, 1_002, trial);
    expect(b.state).toBe("open");
    expect(b.since).toBe(1_002);
    expect(b.opened).toBe(2);
  });

  it("moves on health probes: good ones half-open and then close it; once one succeeded, a bad one reopens it", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    request(b, 0, false);
    // A failed probe while open changes nothing: not another opening, and the cool-down runs on.
    b.probed(false, 50);
    expect(b.since).toBe(0);
    expect(b.opened).toBe(1);
    b.probed(true, 100);
    expect(b.state).toBe("half-open");
    // Its probe endpoint answered: a failure now says the backend is down again.
    b.probed(false, 200);
    expect(b.state).toBe("open");
    expect(b.since).toBe(200);
    expect(b.opened).toBe(2);
    b.probed(true, 300);
    b.probed(true, 400);
    b.probed(true, 500);
    expect(b.state).toBe("closed");
  });

  it("half-open by its cool-down, before any probe succeeded: a failed probe is no evidence, the trials decide", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    request(b, 0, false);
    expect(b.admits(1_000)).toBe(true);
    b.probed(false, 1_100);
    expect([b.state, b.opened]).toEqual(["half-open", 1]);
    // A failed trial opens it again, as ever.
    request(b, 1_200, false);
    expect([b.state, b.opened]).toEqual(["open", 2]);
  });

  it("remembers a probe's success until it opens again", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    request(b, 0, false);
    b.probed(true, 100);
    // A trial fails: opened again, and what the probe said is of the earlier opening.
    request(b, 200, false);
    expect([b.state, b.opened]).toEqual(["open", 2]);
    expect(b.admits(1_200)).toBe(true);
    b.probed(false, 1_300);
    expect(b.state).toBe("half-open");
    // Closed by its trials, then opened by a new outage: its probe endpoint is unknown again.
    request(b, 1_400, true);
    request(b, 1_500, true);
    expect(b.state).toBe("closed");
    request(b, 1_600, false);
    expect(b.admits(2_600)).toBe(true);
    b.probed(false, 2_700);
    expect([b.state, b.opened]).toEqual(["half-open", 3]);
    // A restored half-open breaker has none to remember either.
    b.probed(true, 2_800);
    const restored = new Breaker({ ...params, consecutiveFailures: 1 });
    restored.restore(b.snapshot());
    restored.probed(false, 2_900);
    expect(restored.state).toBe("half-open");
  });

  it("a backend whose probe never answered (no /health): a failed probe while its trials are in flight leaves them to decide", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    request(b, 0, false);
    b.probed(false, 500);
    expect(b.admits(1_000)).toBe(true);
    const t1 = b.sent();
    expect(b.admits(1_001)).toBe(true);
    const t2 = b.sent();
    // Its probe endpoint 404s (Ollama has none, an ingress may expose only /v1/*): no word on the engine.
    b.probed(false, 1_500);
    // Two chat streams of two seconds, both good: the backend is back.
    b.record(true, 3_000, t1);
    b.record(true, 3_001, t2);
    expect([b.state, b.opened]).toEqual(["closed", 1]);
  });

  it("opened by silence, takes no good probe as evidence: only its cool-down half-opens it and only trials close it", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    b.record(false, 0, false, true);
    expect([b.state, b.silent]).toEqual(["open", true]);
    b.probed(true, 100);
    b.probed(true, 200);
    expect(b.state).toBe("open");
    expect(b.admits(1_000)).toBe(true);
    b.probed(true, 1_100);
    b.probed(true, 1_200);
    expect(b.state).toBe("half-open");
    // A failed probe still counts, and the silence stands.
    b.probed(false, 1_300);
    expect([b.state, b.silent]).toEqual(["open", true]);
    expect(b.admits(2_300)).toBe(true);
    request(b, 2_400, true);
    request(b, 2_500, true);
    expect([b.state, b.silent]).toEqual(["closed", false]);
    // Opened by another failure, it moves on probes again.
    request(b, 2_600, false);
    b.probed(true, 2_700);
    expect([b.state, b.silent]).toEqual(["half-open", false]);
  });

  it("a silent trial's failure opens it silent again, and a silent breaker's state survives a restore", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1 });
    request(b, 0, false);
    expect(b.admits(1_000)).toBe(true);
    b.record(false, 1_100, b.sent(), true);
    expect([b.state, b.silent]).toEqual(["open", true]);
    const restored = new Breaker(params);
    restored.restore(b.snapshot());
    restored.probed(true, 1_200);
    expect([restored.state, restored.silent]).toEqual(["open", true]);
  });

  it("gives a trial slot back when its request ends without a verdict", () => {
    const b = new Breaker({ ...params, consecutiveFailures: 1, halfOpenRequests: 1 });
    request(b, 0, false);
    expect(b.admits(1_000)).toBe(true);
    const trial = b.sent();
    expect(b.admits(1_001)).toBe(false);
    b.abandon(trial);
    expect(b.admits(1_002)).toBe(true);
  });
});
