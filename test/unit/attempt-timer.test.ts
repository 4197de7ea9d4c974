import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { AttemptTimer } from "../../workers/gateway/attempt-timer.ts";

describe("an attempt's one timer", () => {
  beforeEach(() => vi.useFakeTimers({ now: 0 }));
  afterEach(() => vi.useRealTimers());
  const calls = () => ({ limit: vi.fn(), renew: vi.fn() });

  it("renews every interval until the limit, then fires the limit once and stops", () => {
    const { limit, renew } = calls();
    new AttemptTimer(35_000, 10_000, limit, renew);
    vi.advanceTimersByTime(34_999);
    expect(renew).toHaveBeenCalledTimes(3);
    expect(limit).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(limit).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(60_000);
    expect(limit).toHaveBeenCalledTimes(1);
    expect(renew).toHaveBeenCalledTimes(3);
  });

  it("once lifted (a stream's first byte), only renews, for as long as it runs", () => {
    const { limit, renew } = calls();
    // A limit shorter than the renewal interval: the armed timer is the limit's, and lifting re-arms it as a renewal.
    const t = new AttemptTimer(300, 10_000, limit, renew);
    vi.advanceTimersByTime(100);
    t.lift();
    vi.advanceTimersByTime(45_000);
    expect(limit).not.toHaveBeenCalled();
    expect(renew).toHaveBeenCalledTimes(4);
    t.stop();
    vi.advanceTimersByTime(60_000);
    expect(renew).toHaveBeenCalledTimes(4);
  });

  it("stopped (the answer came), does nothing more", () => {
    const { limit, renew } = calls();
    const t = new AttemptTimer(600_000, 10_000, limit, renew);
    vi.advanceTimersByTime(5);
    t.stop();
    t.lift();
    vi.advanceTimersByTime(700_000);
    expect(limit).not.toHaveBeenCalled();
    expect(renew).not.toHaveBeenCalled();
  });
});
