import { describe, expect, it } from "vitest";
import { flushRetryMs } from "../../src/routing/lease-book.ts";

describe("flushRetryMs: when an isolate tries again to send releases its object did not take", () => {
  it("soon at first, then less often, and stops within the 30 s a finished request's waitUntil runs", () => {
    const delays: number[] = [];
    for (let failures = 1; failures <= 100; failures++) {
      const ms = flushRetryMs(failures);
      if (ms === null) break;
      delays.push(ms);
    }
    expect(delays).toEqual([100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    expect(delays.reduce((a, b) => a + b, 0)).toBeLessThan(30_000);
    expect(flushRetryMs(0)).toBeNull();
  });
});
