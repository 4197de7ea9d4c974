import { describe, expect, it } from "vitest";
import { HotPrefixes } from "../../src/routing/hot-prefixes.ts";

describe("HotPrefixes: decaying hit scores per prefix, bounded", () => {
  it("scores a prefix by its recent hits, halving over a half-life", () => {
    const hot = new HotPrefixes(64, 1000);
    expect(hot.hit(7, 0)).toBe(1);
    expect(hot.hit(7, 0)).toBe(2);
    expect(hot.hit(7, 1000)).toBeCloseTo(2, 9);
  });

  it("forgets the least recently hit prefixes first and never holds more than its capacity", () => {
    const hot = new HotPrefixes(64, 1e9);
    for (let h = 0; h < 64; h++) hot.hit(h, 0);
    // Hit again, 0 becomes the most recent: past the capacity the next least recent go instead.
    hot.hit(0, 0);
    for (let h = 1000; h < 1010; h++) hot.hit(h, 0);
    expect(hot.hit(0, 0)).toBe(3);
    expect(hot.hit(1, 0)).toBe(1);
    expect(hot.hit(63, 0)).toBe(2);
    for (let h = 2000; h < 2000 + 10 * 64; h++) hot.hit(h, 0);
    expect(hot.size).toBeLessThanOrEqual(64);
  });
});
