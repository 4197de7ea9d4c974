import { describe, expect, it } from "vitest";
import { flushRetryMs, LeaseBook } from "../../src/routing/lease-book.ts";
import { leaseId, leaseIncarnation } from "../../src/routing/protocol.ts";

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

describe("LeaseBook.answeredBy: an object that answers as another incarnation restarted since", () => {
  const renewal = (lease: string) => ({ lease, version: "v1", backendId: "b0" });

  it("has every lease the isolate holds there due at once, long before its renewal interval", () => {
    const book = new LeaseBook();
    book.hold("g", renewal("a.1"), 10_000, 0);
    book.hold("g", renewal("a.2"), 10_000, 0);
    book.hold("other", renewal("c.1"), 10_000, 0);
    expect(book.answeredBy("g", "a")).toBe(false);
    expect(book.answeredBy("other", "c")).toBe(false);
    // Answers of the same incarnation change nothing: nothing due 1 s in.
    expect(book.answeredBy("g", "a")).toBe(false);
    expect(book.takeRenewals("g", 1_000)).toEqual([]);
    expect(book.answeredBy("g", "b")).toBe(true);
    expect(book.takeRenewals("g", 1_000).map((h) => h.renewal.lease)).toEqual(["a.1", "a.2"]);
    // Taken once: the next call carries none of them again; another object's leases are not due.
    expect(book.takeRenewals("g", 1_001)).toEqual([]);
    expect(book.takeRenewals("other", 1_000)).toEqual([]);
    expect(book.answeredBy("g", "b")).toBe(false);
  });

  it("does not send again the renewals the answered call itself carried: the new object took them", () => {
    const book = new LeaseBook();
    book.hold("g", renewal("a.1"), 10_000, 0);
    book.hold("g", renewal("a.2"), 10_000, 0);
    book.answeredBy("g", "a");
    // Both due at 5 s; a.1 rides along with the call the new incarnation answers, a.2 waits.
    const carried = book.takeRenewals("g", 5_000).filter((h) => h.renewal.lease === "a.1");
    expect(book.answeredBy("g", "b", carried)).toBe(true);
    expect(book.takeRenewals("g", 5_001).map((h) => h.renewal.lease)).toEqual(["a.2"]);
    // Every lease carried: nothing left to send.
    const all = new LeaseBook();
    all.hold("g", renewal("a.1"), 10_000, 0);
    all.answeredBy("g", "a");
    expect(all.answeredBy("g", "b", all.takeRenewals("g", 5_000))).toBe(false);
  });

  it("reads the incarnation from a decision's lease, by a compare of its head while it is the one last seen", () => {
    const book = new LeaseBook();
    book.hold("g", renewal("a.1"), 10_000, 0);
    expect(book.answeredWith("g", "a.1")).toBe(false);
    expect(book.answeredWith("g", "a.2")).toBe(false);
    // A longer incarnation that begins alike is another.
    expect(book.answeredWith("g", "ab.1")).toBe(true);
    expect(book.answeredWith("g", "no-dot")).toBe(false);
    expect(book.takeRenewals("g", 1).map((h) => h.renewal.lease)).toEqual(["a.1"]);
  });

  it("says nothing to send when the isolate holds no lease there", () => {
    const book = new LeaseBook();
    book.hold("g", renewal("a.1"), 10_000, 0);
    expect(book.answeredBy("g", "a")).toBe(false);
    book.drop("g", "a.1");
    expect(book.answeredBy("g", "b")).toBe(false);
  });
});

describe("leaseIncarnation: which incarnation of its object a lease id names", () => {
  it("reads what leaseId wrote, and nothing from an id not made so", () => {
    expect(leaseIncarnation(leaseId("k3x9z", 123456))).toBe("k3x9z");
    expect(leaseIncarnation("no-dot")).toBeUndefined();
    expect(leaseIncarnation(".1")).toBeUndefined();
  });
});
