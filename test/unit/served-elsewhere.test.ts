import { describe, expect, it } from "vitest";
import { ServedElsewhere } from "../../src/sharding/served-elsewhere.ts";
import { judgedBySilence, silenceLookbackMs, silentWhileOthersServe } from "../../src/routing/silence.ts";

describe("ServedElsewhere", () => {
  it("answers when a backend other than the one asked about last served", () => {
    const s = new ServedElsewhere();
    expect(s.otherThan("g", "a")).toBe(-Infinity);
    s.served("g", "a", 10);
    expect(s.otherThan("g", "a")).toBe(-Infinity);
    expect(s.otherThan("g", "b")).toBe(10);
    s.served("g", "b", 20);
    s.served("g", "b", 30);
    expect(s.otherThan("g", "b")).toBe(10);
    expect(s.otherThan("g", "a")).toBe(30);
    expect(s.otherThan("g", "c")).toBe(30);
    expect(s.otherThan("other", "c")).toBe(-Infinity);
  });
});

describe("silentWhileOthersServe with another shard's serving", () => {
  it("counts it as another backend's, but never blames one that served since the request was sent", () => {
    const alone = { servedAt: -Infinity };
    expect(silentWhileOthersServe(alone, 1_000, 400, [alone])).toBe(false);
    expect(silentWhileOthersServe(alone, 1_000, 400, [alone], 700)).toBe(true);
    // Before the timeout's length ahead of the request: no evidence of the same traffic.
    expect(silentWhileOthersServe(alone, 1_000, 400, [alone], 500)).toBe(false);
    expect(silentWhileOthersServe({ servedAt: 1_200 }, 1_000, 400, [], 1_300)).toBe(false);
  });
});

describe("judgedBySilence", () => {
  it("judges a non-streamed generation the gateway cut and a gateway's 502 or 504 judged the request's, nothing else", () => {
    expect(judgedBySilence({ outcome: "client-abort", timedOut: true, failure: "timeout" })).toBe(true);
    expect(judgedBySilence({ outcome: "rejected", failure: "server-error", viaGateway: true })).toBe(true);
    // An engine's own 500, or an answer no server gives: a busy backend serves nothing in the milliseconds two of them take.
    expect(judgedBySilence({ outcome: "rejected", failure: "server-error" })).toBe(false);
    expect(judgedBySilence({ outcome: "rejected", failure: "bad-answer" })).toBe(false);
    // A first token not come in time, twice: a prompt too long to prefill (workers/gateway/held-failure.ts cut).
    expect(judgedBySilence({ outcome: "rejected", failure: "timeout", timedOut: true })).toBe(false);
    // The group's word: an endpoint none serves, a firewall refusing the prompt on every backend.
    expect(judgedBySilence({ outcome: "rejected", failure: "not-served" })).toBe(false);
    expect(judgedBySilence({ outcome: "rejected", failure: "credentials" })).toBe(false);
    expect(judgedBySilence({ outcome: "rejected" })).toBe(false);
    expect(judgedBySilence({ outcome: "client-abort" })).toBe(false);
    expect(judgedBySilence({ outcome: "upstream-error", failure: "server-error" })).toBe(false);
  });

  it("looks back a timeout's length for a cut generation, not at all for a failure that came at once", () => {
    const alone = { servedAt: -Infinity };
    expect(silenceLookbackMs({ outcome: "client-abort", timedOut: true }, 400)).toBe(400);
    expect(silenceLookbackMs({ outcome: "rejected", failure: "server-error" }, 400)).toBe(0);
    // Another backend served before the failed request was sent: no evidence against its backend.
    expect(silentWhileOthersServe(alone, 1_000, 0, [alone, { servedAt: 999 }])).toBe(false);
    expect(silentWhileOthersServe(alone, 1_000, 0, [alone, { servedAt: 1_000 }])).toBe(true);
  });
});
