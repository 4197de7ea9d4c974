import { describe, expect, it } from "vitest";
import { PrefixSet, type Lesson } from "../../src/routing/prefix-set.ts";

const chain = (prefix: number, n: number) => Array.from({ length: n }, (_, i) => prefix * 1_000_000 + i);
const has = (s: PrefixSet, h: number) => s.match([h]) === 1;

/** Seeded so runs are reproducible. */
function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** Every present block of every chain has its whole prefix present. */
function expectPrefixClosed(s: PrefixSet, chains: number[][]): void {
  const orphans: number[] = [];
  for (const c of chains) {
    for (let i = 1; i < c.length; i++) if (has(s, c[i] as number) && !has(s, c[i - 1] as number)) orphans.push(c[i] as number);
  }
  expect(orphans).toEqual([]);
}

describe("PrefixSet lessons: what routing taught, taken back when the backend did not serve it", () => {
  it("a lesson is the blocks past the match; taking it back restores the set and the last block's mark", () => {
    const s = new PrefixSet(100);
    const base = chain(1, 5);
    s.learn(base);
    const before = s.values();
    const lesson = s.learn([...base, ...chain(2, 5)]) as Lesson;
    expect([...lesson.blocks]).toEqual(chain(2, 5));
    expect(lesson.parent).toBe(base[4]);
    expect(s.isInterior(base[4] as number)).toBe(true);
    s.unlearn(lesson);
    expect(s.values().sort()).toEqual(before.sort());
    // The conversation coming back is a conversation again, not a branch point.
    expect(s.isInterior(base[4] as number)).toBe(false);
  });

  it("learning what it already holds teaches nothing", () => {
    const s = new PrefixSet(100);
    s.learn(chain(1, 8));
    expect(s.learn(chain(1, 8))).toBeNull();
    expect(s.learn(chain(1, 3))).toBeNull();
  });

  it("keeps the blocks a later request went through, so the set stays prefix-closed", () => {
    const s = new PrefixSet(100);
    const base = chain(1, 5);
    s.learn(base);
    const failed = [...base, ...chain(2, 5)];
    const lesson = s.learn(failed) as Lesson;
    // Another request shares the first three new blocks, then goes its own way.
    const other = [...base, ...chain(2, 3), ...chain(3, 2)];
    s.learn(other);
    s.unlearn(lesson);
    expect(s.match(other)).toBe(10);
    expect(s.match(failed)).toBe(8);
    expect(s.isInterior(chain(2, 3)[2] as number)).toBe(true);
    expectPrefixClosed(s, [failed, other]);
  });

  it("stays prefix-closed and bounded under any mix of learning, taking back and eviction", () => {
    const r = rng(11);
    const s = new PrefixSet(60);
    // Chains that share roots and branch, as conversations on common system prompts do.
    const chains = Array.from({ length: 30 }, (_, k) => [...chain(k % 4, 3 + (k % 5)), ...chain(100 + k, 1 + Math.floor(r() * 20))]);
    const outstanding: Lesson[] = [];
    for (let step = 0; step < 2000; step++) {
      if (outstanding.length > 0 && r() < 0.4) {
        const [lesson] = outstanding.splice(Math.floor(r() * outstanding.length), 1);
        s.unlearn(lesson as Lesson);
      } else {
        const lesson = s.learn(chains[Math.floor(r() * chains.length)] as number[]);
        if (lesson) outstanding.push(lesson);
      }
      expect(s.size).toBeLessThanOrEqual(60);
      expectPrefixClosed(s, chains);
    }
  });
});

describe("PrefixSet memory", () => {
  it("costs at most 32 bytes an entry when full, and gives memory back when its capacity shrinks", () => {
    const s = new PrefixSet(65_536);
    for (let k = 0; s.size < 65_536; k++) s.learn(chain(k, 64));
    expect(s.bytes / s.size).toBeLessThanOrEqual(32);
    const newest = chain(9_999, 10);
    s.learn(newest);
    s.resize(1000);
    expect(s.size).toBe(1000);
    expect(s.bytes).toBeLessThanOrEqual(1000 * 32 + 64);
    // What eviction keeps is the most recent: the last chain learned is whole.
    expect(s.match(newest)).toBe(10);
  });
});
