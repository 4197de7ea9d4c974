import { describe, expect, it } from "vitest";
import { ServedElsewhere } from "../../src/sharding/served-elsewhere.ts";
import { silentWhileOthersServe } from "../../src/routing/silence.ts";

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
