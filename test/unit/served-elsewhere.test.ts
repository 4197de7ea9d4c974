import { describe, expect, it } from "vitest";
import { ServedElsewhere } from "../../src/sharding/served-elsewhere.ts";
import { judgedBySilence, silenceWindow, silentWhileOthersServe } from "../../src/routing/silence.ts";

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
    const w = { silentSince: 1_000, othersSince: 600 };
    expect(silentWhileOthersServe(alone, w, [alone])).toBe(false);
    expect(silentWhileOthersServe(alone, w, [alone], 700)).toBe(true);
    // Before the timeout's length ahead of the request: no evidence of the same traffic.
    expect(silentWhileOthersServe(alone, w, [alone], 500)).toBe(false);
    expect(silentWhileOthersServe({ servedAt: 1_200 }, w, [], 1_300)).toBe(false);
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

  it("judges a cut generation by its own time and a timeout's length before, a gateway's failure by the breaker's window for both", () => {
    const group = { nonStreamTimeoutMs: 400, breaker: { windowMs: 10_000 } };
    expect(silenceWindow({ outcome: "client-abort", timedOut: true }, 20_000, group)).toEqual({ silentSince: 20_000, othersSince: 19_600 });
    const gateway = silenceWindow({ outcome: "rejected", failure: "server-error", viaGateway: true }, 20_000, group);
    expect(gateway).toEqual({ silentSince: 10_000, othersSince: 10_000 });
    // A backend that served within the window is working: an instant 502 says little of it.
    expect(silentWhileOthersServe({ servedAt: 12_000 }, gateway, [{ servedAt: 15_000 }])).toBe(false);
    expect(silentWhileOthersServe({ servedAt: 9_999 }, gateway, [{ servedAt: 15_000 }])).toBe(true);
    // Another backend served before the window: no evidence against its backend.
    expect(silentWhileOthersServe({ servedAt: -Infinity }, gateway, [{ servedAt: 9_999 }])).toBe(false);
  });
});
