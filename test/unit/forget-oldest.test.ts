import { describe, expect, it } from "vitest";
import { forgetOldest } from "../../src/routing/forget-oldest.ts";

describe("forgetOldest: the first entries of an insertion-ordered table, deleted in one walk", () => {
  it("deletes the n least recently inserted of a Map or a Set and keeps the rest in order", () => {
    const map = new Map(Array.from({ length: 10 }, (_, i) => [i, String(i)] as const));
    map.delete(0);
    map.set(0, "again");
    forgetOldest(map, 3);
    expect([...map.keys()]).toEqual([4, 5, 6, 7, 8, 9, 0]);
    const set = new Set(["a", "b", "c"]);
    forgetOldest(set, 5);
    expect(set.size).toBe(0);
    const kept = new Set(["a"]);
    forgetOldest(kept, 0);
    expect([...kept]).toEqual(["a"]);
  });
});
