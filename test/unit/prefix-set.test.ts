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
  it("a lesson is the blocks past the match; taking it back restores the set, and the block before is a chain end again", () => {
    const s = new PrefixSet(100);
    const base = chain(1, 5);
    s.learn(base);
    const before = s.values();
    const lesson = s.learn([...base, ...chain(2, 5)]) as Lesson;
    expect(lesson.blocks).toBe(5);
    expect(lesson.tip).toBe(chain(2, 5)[4]);
    expect(s.isInterior(base[4] as number)).toBe(true);
    s.unlearn(lesson);
    expect(s.values().sort()).toEqual(before.sort());
    // The conversation coming back is a conversation again, not a branch point.
    expect(s.isInterior(base[4] as number)).toBe(false);
  });

  it("keeps a lesson's blocks where a later request ended", () => {
    const s = new PrefixSet(100);
    const lesson = s.learn(chain(1, 8)) as Lesson;
    s.learn(chain(1, 5));
    s.unlearn(lesson);
    expect(s.match(chain(1, 8))).toBe(5);
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
  it("costs at most 36 bytes an entry when full, and gives memory back when its capacity shrinks", () => {
    const s = new PrefixSet(65_536);
    for (let k = 0; s.size < 65_536; k++) s.learn(chain(k, 64));
    expect(s.bytes / s.size).toBeLessThanOrEqual(36);
    const newest = chain(9_999, 10);
    s.learn(newest);
    s.resize(1000);
    expect(s.size).toBe(1000);
    // 32 bytes a slot, and 4-byte buckets to the next power of two.
    expect(s.bytes).toBeLessThanOrEqual(1000 * 32 + 1024 * 4);
    // What eviction keeps is the most recent: the last chain learned is whole.
    expect(s.match(newest)).toBe(10);
  });
});

describe("PrefixSet eviction: the oldest chain end first, never the chain being learned", () => {
  it("a conversation's new turn keeps its history: another chain learned between them goes first", () => {
    const s = new PrefixSet(30);
    const history = chain(1, 12);
    s.learn(history);
    const other = chain(2, 12);
    s.learn(other);
    // The next turn adds 6 blocks: 30 held. Its history was learned before the other chain, yet
    // the turn made it the newest; the next insert evicts the other chain's end.
    const turn = [...history, ...chain(3, 6)];
    s.learn(turn);
    s.learn(chain(4, 1));
    expect(s.match(turn)).toBe(18);
    expect(s.match(other)).toBe(11);
  });

  it("a block whose last continuation was evicted is the next to go, before younger chain ends", () => {
    const s = new PrefixSet(20);
    const shared = chain(1, 4);
    s.learn([...shared, ...chain(2, 4)]);
    s.learn(chain(3, 8));
    s.learn(chain(4, 4));
    // Full. Five new blocks evict the old branch (4), then the shared prefix's end it left (1).
    s.learn(chain(5, 5));
    expect(s.match([...shared, ...chain(2, 4)])).toBe(3);
    expect(s.match(chain(3, 8))).toBe(8);
    expect(s.match(chain(4, 4))).toBe(4);
    expect(s.isInterior(shared[2] as number)).toBe(false);
  });

  it("learns a chain as long as its capacity whole, evicting everything else", () => {
    const s = new PrefixSet(10);
    s.learn(chain(1, 6));
    s.learn([...chain(1, 3), ...chain(2, 3)]);
    const whole = chain(3, 10);
    expect(s.learn(whole)?.blocks).toBe(10);
    expect(s.match(whole)).toBe(10);
    expect(s.size).toBe(10);
    expect(s.match(chain(1, 6))).toBe(0);
  });

  it("forgets a branch point once the other chain through it is evicted", () => {
    const s = new PrefixSet(12);
    const shared = chain(1, 4);
    s.learn([...shared, ...chain(2, 4)]);
    s.learn(shared);
    s.learn(chain(3, 4));
    expect(s.isInterior(shared[3] as number)).toBe(true);
    s.learn(chain(4, 4));
    expect(s.isInterior(shared[3] as number)).toBe(false);
    expect(s.match(shared)).toBe(4);
  });
});

describe("PrefixSet match recency: where a learn's match stood in the eviction order", () => {
  it("is 0 for the newest chain end, near 1 for the next to go, in between by age, NaN when nothing matched", () => {
    const s = new PrefixSet(100);
    for (let c = 1; c <= 5; c++) s.learn(chain(c, 4));
    s.learn(chain(9, 4));
    expect(s.matchRecency).toBeNaN();
    // Chain 5 is the newest but one: its age is 2 learns, the oldest's (chain 1) 6.
    s.learn(chain(5, 4));
    expect(s.matchRecency).toBeCloseTo(2 / 6, 5);
    s.learn(chain(5, 4));
    expect(s.matchRecency).toBe(0);
    s.learn(chain(1, 4));
    expect(s.matchRecency).toBe(1);
    // A match that stops inside a held chain reads the age of the last learn that stopped there.
    s.learn([...chain(2, 2), ...chain(7, 3)]);
    expect(s.matchRecency).toBe(1);
  });

  it("gives a block its evicted child's age when that leaves it the next to go", () => {
    const s = new PrefixSet(10);
    const shared = chain(1, 4);
    const branch = [...shared, ...chain(2, 4)];
    s.learn(branch);
    s.learn(chain(6, 1));
    // The branch comes back whole: only its end's stamp moves (learn 3); the blocks above keep learn 1's.
    s.learn(branch);
    s.learn(chain(7, 1));
    // Five new blocks evict chain 6, then the branch from its end up: the shared prefix's end is the oldest leaf.
    s.learn(chain(8, 5));
    expect(s.match(branch)).toBe(4);
    expect(s.isInterior(shared[3] as number)).toBe(false);
    // Chain 7 is 2 learns old; the oldest leaf 3 (its evicted branch's age), not 5 (its own last learn's).
    s.learn(chain(7, 1));
    expect(s.matchRecency).toBeCloseTo(2 / 3, 5);
  });
});

describe("PrefixSet snapshots", () => {
  function branching(): PrefixSet {
    const s = new PrefixSet(100);
    s.learn(chain(1, 10));
    s.learn([...chain(1, 5), ...chain(2, 3)]);
    s.learn(chain(3, 4));
    s.learn([...chain(1, 5), ...chain(2, 1), ...chain(4, 2)]);
    return s;
  }

  it("loads back the same tree in the same eviction order", () => {
    const a = branching();
    const b = new PrefixSet(100);
    expect(b.importRecent(a.exportRecent(100))).toBe(a.size);
    expect(b.values()).toEqual(a.values());
    for (const c of [chain(1, 10), [...chain(1, 5), ...chain(2, 3)], chain(3, 4)]) expect(b.match(c)).toBe(c.length);
    expect(b.isInterior(chain(1, 5)[4] as number)).toBe(true);
    // Both evict alike from here on.
    for (const s of [a, b]) s.resize(9);
    expect(b.values()).toEqual(a.values());
  });

  it("a snapshot of fewer blocks keeps the newest chain ends, top down: prefix-closed", () => {
    const a = branching();
    const c = new PrefixSet(100);
    expect(c.importRecent(a.exportRecent(9))).toBe(9);
    expect(c.match([...chain(1, 5), ...chain(2, 1), ...chain(4, 2)])).toBe(8);
    expect(c.match(chain(3, 4))).toBe(1);
    expect(c.match(chain(1, 10))).toBe(5);
  });

  it("loads no more than its capacity, the newest first", () => {
    const a = branching();
    const c = new PrefixSet(8);
    expect(c.importRecent(a.exportRecent(100))).toBe(8);
    expect(c.size).toBe(8);
    expect(c.match([...chain(1, 5), ...chain(2, 1), ...chain(4, 2)])).toBe(8);
  });

  it("loads nothing from a snapshot of the first format or one that does not read", () => {
    const s = new PrefixSet(100);
    // The first format: hashes oldest first, an interior block as −(hash + 1).
    expect(s.importRecent(Float64Array.from([3, 2, -2, -1]))).toBe(0);
    expect(s.importRecent(new Float64Array(0))).toBe(0);
    expect(s.size).toBe(0);
    const good = branching().exportRecent(100);
    const cut = good.slice(0, 12);
    cut[1] = 7;
    expect(s.importRecent(cut)).toBe(0);
    expect(s.size).toBe(0);
  });

  it("survives any mix of learning, taking back, eviction, resizing and reloading", () => {
    const r = rng(5);
    let s = new PrefixSet(80);
    const chains = Array.from({ length: 40 }, (_, k) => [...chain(k % 5, 2 + (k % 7)), ...chain(100 + k, 1 + Math.floor(r() * 30))]);
    const outstanding: Lesson[] = [];
    for (let step = 0; step < 3000; step++) {
      const x = r();
      if (x < 0.3 && outstanding.length > 0) s.unlearn(outstanding.splice(Math.floor(r() * outstanding.length), 1)[0] as Lesson);
      else if (x < 0.32) s.resize(20 + Math.floor(r() * 100));
      else if (x < 0.34) {
        const t = new PrefixSet(s.capacity);
        t.importRecent(s.exportRecent(s.size));
        expect(t.values()).toEqual(s.values());
        s = t;
        outstanding.length = 0;
      } else {
        const lesson = s.learn(chains[Math.floor(r() * chains.length)] as number[]);
        if (lesson) outstanding.push(lesson);
      }
      expect(s.size).toBeLessThanOrEqual(s.capacity);
      expect(s.values().length).toBe(s.size);
      expectPrefixClosed(s, chains);
    }
  });
});

describe("PrefixSet match with guesses: what other sets matched of the chain", () => {
  it("finds the same match as a plain search, whatever the guesses", () => {
    const r = rng(11);
    // Prompts as texts of a few words each, hashed block by block as the Worker does: each hash covers all before it.
    const hashed = (words: readonly number[]) => {
      let h = 7;
      return words.map((w) => (h = (h * 1_000_003 + w) % 2 ** 48));
    };
    const bases = Array.from({ length: 6 }, (_, k) => Array.from({ length: 40 }, (_, i) => k * 100 + i));
    const prompt = () => {
      const base = bases[Math.floor(r() * bases.length)] as number[];
      return hashed([...base.slice(0, Math.floor(r() * (base.length + 1))), ...Array.from({ length: Math.floor(r() * 20) }, () => 1000 + Math.floor(r() * 3))]);
    };
    const s = new PrefixSet(400);
    for (let k = 0; k < 60; k++) s.learn(prompt());
    for (let t = 0; t < 2000; t++) {
      const c = prompt();
      const guesses = Array.from({ length: Math.floor(r() * 5) }, () => Math.floor(r() * (c.length + 3)) - 1);
      const plain = new PrefixSet(400);
      plain.importRecent(s.exportRecent(s.size));
      expect(s.match(c, guesses, guesses.length)).toBe(plain.match(c));
    }
  });

  it("learns the same with a right guess, a wrong one or none", () => {
    const base = chain(1, 30);
    const longer = [...base, ...chain(2, 10)];
    for (const guess of [-1, 0, 12, 30, 31, 40, 99]) {
      const s = new PrefixSet(100);
      s.learn(base);
      const lesson = s.learn(longer, guess) as Lesson;
      expect(lesson.blocks).toBe(10);
      expect(s.match(longer)).toBe(40);
      expect(s.values().length).toBe(40);
    }
  });
});

describe("PrefixSet given blocks that are not a hash chain", () => {
  it("stays whole when a chain repeats a block it holds: counts, eviction and taking back still agree", () => {
    const s = new PrefixSet(16);
    const a = chain(1, 6);
    s.learn(a);
    // Past its match of a's first block, this chain ends in a's last block: a prefix hash never does.
    const odd = [a[0] as number, 77, 78, 79, 80, a[5] as number];
    const lesson = s.learn(odd) as Lesson;
    expect(lesson.blocks).toBe(5);
    expect(s.size).toBe(11);
    expect(s.values().length).toBe(11);
    s.unlearn(lesson);
    expect(s.size).toBe(6);
    for (let k = 0; k < 10; k++) s.learn(chain(10 + k, 8));
    expect(s.size).toBe(16);
    expect(s.values().length).toBe(16);
    s.resize(1);
    expect(s.size).toBe(1);
  });

  it("never outgrows its capacity when a chain's match is found deeper than its own place (a collision)", () => {
    const s = new PrefixSet(9);
    const held = chain(1, 9);
    s.learn(held);
    // Its first block is the held chain's last: a path of ten blocks for a chain of three.
    const odd = [held[8] as number, 77, 78];
    expect(s.match(odd)).toBe(1);
    const lesson = s.learn(odd, 1);
    expect(lesson).toBeNull();
    expect(s.size).toBe(9);
    expect(s.values().length).toBe(9);
    // Every lookup still ends (a bucket once linked to a slot past the arrays' end, walked for ever).
    expect(s.match(odd)).toBe(1);
    // Room made elsewhere, it learns what fits.
    s.resize(12);
    expect(s.learn(odd, 1)).toMatchObject({ blocks: 2 });
    expect(s.size).toBe(11);
    expect(s.values().length).toBe(11);
  });
});
