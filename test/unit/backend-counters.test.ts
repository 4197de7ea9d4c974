import { describe, expect, it } from "vitest";
import { BackendCounters } from "../../src/metrics/backend-counters.ts";
import type { FailureKind } from "../../src/upstream/answer.ts";

describe("a backend's failed attempts by cause", () => {
  it("counts the causes it knows, and none a Worker of another release names, an inherited name included", () => {
    const c = new BackendCounters();
    c.released("upstream-error", undefined, undefined, undefined, 0, "timeout");
    for (const other of ["constructor", "toString", "__proto__", "warp-drive"]) c.released("upstream-error", undefined, undefined, undefined, 0, other as FailureKind);
    expect(c.failures.timeout).toBe(1);
    expect(Object.keys(c.failures)).toEqual(["connect", "timeout", "stalled", "broken-off", "unavailable", "server-error", "rate-limited", "credentials", "not-served", "bad-answer", "unreachable"]);
    expect(Object.values(c.failures).every((n) => Number.isInteger(n))).toBe(true);
  });
});
