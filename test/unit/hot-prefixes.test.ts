import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { Backend } from "../../src/routing/backend.ts";
import { HotPrefixes } from "../../src/routing/hot-prefixes.ts";
import { PrefixMatch } from "../../src/routing/signals/prefix-match.ts";

describe("HotPrefixes: decaying hit scores per prefix, bounded", () => {
  it("scores a prefix by its recent hits, halving over a half-life", () => {
    const hot = new HotPrefixes(64);
    expect(hot.hit(7, 0, 1000)).toBe(1);
    expect(hot.hit(7, 0, 1000)).toBe(2);
    expect(hot.hit(7, 1000, 1000)).toBeCloseTo(2, 9);
  });

  it("forgets the least recently hit prefixes first and never holds more than its capacity", () => {
    const hot = new HotPrefixes(64);
    for (let h = 0; h < 64; h++) hot.hit(h, 0, 1e9);
    // Hit again, 0 becomes the most recent: past the capacity the next least recent go instead.
    hot.hit(0, 0, 1e9);
    for (let h = 1000; h < 1010; h++) hot.hit(h, 0, 1e9);
    expect(hot.hit(0, 0, 1e9)).toBe(3);
    expect(hot.hit(1, 0, 1e9)).toBe(1);
    expect(hot.hit(63, 0, 1e9)).toBe(2);
    for (let h = 2000; h < 2000 + 10 * 64; h++) hot.hit(h, 0, 1e9);
    expect(hot.size).toBeLessThanOrEqual(64);
  });
});

describe("the prefix-match signal: each call with its caller's version's hotHalfLifeMs", () => {
  const system = Array.from({ length: 40 }, (_, i) => 7_000_000 + i);
  const ask = (q: number) => [...system, 9_000_000 + q];

  function version(hotHalfLifeMs: number): ResolvedGroup {
    const deployments = [0, 1].map((i) => ({ id: `b${i}`, baseUrl: `http://127.0.0.1:${9001 + i}`, model: "m", kvCapacityBlocks: 100 }));
    const r = parseConfig({ modelGroups: [{ name: "g", strategy: "prefix-aware", hotThreshold: 1.5, hotHalfLifeMs, deployments }] });
    if (!r.ok) throw new Error(r.error);
    return r.config.groups[0] as ResolvedGroup;
  }
  const slow = version(1e9);
  const fast = version(1000);

  /** Both backends usable, b0 holding `learned`. */
  function fleet(learned: number[][]): Backend[] {
    return slow.deployments.map((d, i) => {
      const b = new Backend(d, slow);
      b.maxInFlight = d.maxInFlight;
      if (i === 0) for (const c of learned) b.prefixes.learn(c);
      return b;
    });
  }

  it("scores a prefix hot by the half-life of the version that asks, not the first one", () => {
    // b0 holds the system prompt alone: no branch, so only its score can make it shared.
    for (const [first, later, shared] of [
      [slow, fast, false],
      [fast, slow, true],
    ] as const) {
      const signal = new PrefixMatch();
      const backends = fleet([system]);
      signal.produce(backends, ask(1), first, 0);
      expect(signal.shared).toBe(false);
      // 100 s on: at a half-life of 1 s the first hit counts for nothing, at 1e9 ms for all of it (2 ≥ hotThreshold, 1.5).
      signal.produce(backends, ask(2), later, 100_000);
      expect(signal.shared).toBe(shared);
    }
  });

  it("forgets a shared prefix from the working set after three of the asking version's half-lives", () => {
    // Two branch points of 30 blocks each: copies of one take 30% of a backend's 100-block cache, within the half they may; of both, 60%.
    const a = system.slice(0, 30);
    const b = a.map((h) => h + 1_000_000);
    const backends = fleet([
      [...a, 1],
      [...a, 2],
      [...b, 1],
      [...b, 2],
    ]);
    const signal = new PrefixMatch();
    signal.produce(backends, [...a, 3], slow, 0);
    expect(signal.replicable).toEqual([true, true]);
    // 100 s on, for the fast version the first prefix left the working set long ago: the second is the only one.
    signal.produce(backends, [...b, 3], fast, 100_000);
    expect(signal.shared).toBe(true);
    expect(signal.replicable).toEqual([true, true]);
  });
});
