import { describe, expect, it } from "vitest";
import { ORDER_GAP, positionsToWrite } from "../../src/fleet/stored-order.ts";

/** The rows of `keys` once `positionsToWrite` moved those it must, read back in their stored order. */
function readBack(keys: string[], stored: Map<string, number>): { order: string[]; written: string[] } {
  const moved = positionsToWrite(keys, stored);
  const at = new Map([...keys.map((k) => [k, stored.get(k) as number] as const), ...moved]);
  return { order: [...keys].sort((a, b) => (at.get(a) as number) - (at.get(b) as number)), written: [...moved.keys()] };
}

const spaced = (keys: string[]) => new Map(keys.map((k, i) => [k, i * ORDER_GAP]));

describe("positions of rows stored in a list's order", () => {
  it("an append, a removal or an insertion anywhere writes the new row alone", () => {
    const stored = spaced(["a", "b", "c", "d"]);
    expect(readBack(["a", "b", "c", "d", "e"], stored)).toEqual({ order: ["a", "b", "c", "d", "e"], written: ["e"] });
    expect(readBack(["a", "c", "d"], stored)).toEqual({ order: ["a", "c", "d"], written: [] });
    expect(readBack(["x", "a", "b", "c", "d"], stored)).toEqual({ order: ["x", "a", "b", "c", "d"], written: ["x"] });
    expect(readBack(["a", "b", "x", "c", "d"], stored)).toEqual({ order: ["a", "b", "x", "c", "d"], written: ["x"] });
  });

  it("a reordering moves the rows it must, and the order read back is the list's", () => {
    const stored = spaced(["a", "b", "c", "d", "e"]);
    expect(readBack(["e", "a", "b", "c", "d"], stored)).toEqual({ order: ["e", "a", "b", "c", "d"], written: ["e"] });
    expect(readBack(["a", "d", "b", "c", "e"], stored)).toEqual({ order: ["a", "d", "b", "c", "e"], written: ["d"] });
    expect(readBack(["e", "d", "c", "b", "a"], stored).order).toEqual(["e", "d", "c", "b", "a"]);
    // Positions stored with no room between them (a fleet stored by the release before: 0, 1, 2…, some shared).
    const tight = new Map([["a", 0], ["b", 1], ["c", 1], ["d", 2]]);
    expect(readBack(["a", "x", "b", "c", "d"], tight).order).toEqual(["a", "x", "b", "c", "d"]);
    const again = readBack(["a", "b", "c", "d"], tight);
    expect(again.order).toEqual(["a", "b", "c", "d"]);
    expect(again.written).not.toContain("a");
  });

  it("whatever was stored and whatever the list, the order read back is the list's", () => {
    let seed = 7;
    const next = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    for (let run = 0; run < 500; run++) {
      const pool = Array.from({ length: 1 + next(12) }, (_, i) => `k${i}`);
      // Stored positions of some keys, close together or spaced, ties allowed.
      const stored = new Map(pool.filter(() => next(4) > 0).map((k) => [k, next(2) === 0 ? next(6) : next(6) * ORDER_GAP]));
      const keys = pool.filter(() => next(5) > 0).sort(() => next(3) - 1);
      const { order } = readBack(keys, stored);
      expect(order).toEqual(keys);
      expect(new Set(order.map((k) => positionsToWrite(keys, stored).get(k) ?? stored.get(k))).size).toBe(keys.length);
    }
  });
});
