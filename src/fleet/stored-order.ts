/**
 * Where rows stored in a list's order go: each row holds a position, and the list is read back
 * sorted by it. Positions are spaced (ORDER_GAP), so that an append, a removal or an insertion
 * rewrites no other row, and a reordering moves only the rows it must.
 */
export const ORDER_GAP = 1024;

/**
 * The positions `keys` (in their order) take, given those `stored` for them (keys not listed are
 * ignored): only the keys whose position is new or changes, with it. The longest run of stored
 * positions already in the list's order stays; every other key takes a place between its
 * neighbours, spread over the room there is, and where there is too little the neighbour after
 * moves too.
 */
export function positionsToWrite(keys: readonly string[], stored: ReadonlyMap<string, number>): Map<string, number> {
  const at = keys.map((k) => stored.get(k));
  const kept = longestIncreasing(at);
  const moved = new Map<string, number>();
  let lo: number | null = null;
  for (let i = 0; i < keys.length; ) {
    if (kept[i]) {
      lo = at[i] as number;
      i++;
      continue;
    }
    // The run of keys to place: up to the next kept one with room below it for them all.
    let j = i;
    for (;;) {
      while (j < keys.length && !kept[j]) j++;
      if (j === keys.length || lo === null || (at[j] as number) - lo > j - i) break;
      j++;
    }
    const hi = j < keys.length ? (at[j] as number) : null;
    const count = j - i;
    const below = lo;
    for (let x = 0; x < count; x++) {
      const key = keys[i + x] as string;
      const pos = placed(below, hi, count, x);
      if (stored.get(key) !== pos) moved.set(key, pos);
      lo = pos;
    }
    i = j;
  }
  return moved;
}

/** The `x`th of `count` positions strictly between `lo` and `hi` (either open when null), which has room for them all. */
function placed(lo: number | null, hi: number | null, count: number, x: number): number {
  if (lo === null) return hi === null ? x * ORDER_GAP : hi - (count - x) * ORDER_GAP;
  return hi === null ? lo + (x + 1) * ORDER_GAP : lo + Math.floor(((hi - lo) * (x + 1)) / (count + 1));
}

/** Which entries of `values` make up a longest strictly increasing run of them (missing ones never do). */
function longestIncreasing(values: readonly (number | undefined)[]): boolean[] {
  // tails[k]: the index ending the best run of length k + 1 found so far; before[i]: the index before i in its run.
  const tails: number[] = [];
  const before = new Array<number>(values.length).fill(-1);
  for (const [i, v] of values.entries()) {
    if (v === undefined) continue;
    let a = 0;
    let b = tails.length;
    while (a < b) {
      const m = (a + b) >> 1;
      if ((values[tails[m] as number] as number) < v) a = m + 1;
      else b = m;
    }
    if (a > 0) before[i] = tails[a - 1] as number;
    tails[a] = i;
  }
  const kept = new Array<boolean>(values.length).fill(false);
  for (let i = tails.length > 0 ? (tails[tails.length - 1] as number) : -1; i >= 0; i = before[i] as number) kept[i] = true;
  return kept;
}
