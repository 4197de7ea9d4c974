import { afterEach, describe, expect, it, vi } from "vitest";
import { Deadline } from "../../workers/gateway/deadline.ts";

/**
 * A request's deadline as it goes from group to group (workers/gateway/deadline.ts): a fallback's
 * totalTimeoutMs bounds the attempts it serves and ends with it.
 */

afterEach(() => {
  vi.useRealTimers();
});

describe("a request's deadline", () => {
  it("is the request's own group's again after a bounded fallback whose bound passed: nothing it found outlives it", () => {
    vi.useFakeTimers();
    const d = new Deadline(undefined);
    d.enter(30);
    d.watch(new AbortController());
    vi.advanceTimersByTime(60);
    expect(d.expired).toBe(true);
    d.enter(undefined);
    expect({ expired: d.expired, msLeft: d.msLeft(), totalMs: d.totalMs }).toEqual({ expired: false, msLeft: Infinity, totalMs: undefined });
  });

  it("still ends when the request's own group's bound has passed, whatever group it goes on to", () => {
    vi.useFakeTimers();
    const d = new Deadline(50);
    const abort = new AbortController();
    d.watch(abort);
    vi.advanceTimersByTime(60);
    d.enter(10_000);
    expect(d.msLeft()).toBeLessThanOrEqual(0);
    d.watch(abort);
    vi.advanceTimersByTime(0);
    expect({ expired: d.expired, aborted: abort.signal.aborted }).toEqual({ expired: true, aborted: true });
  });
});
