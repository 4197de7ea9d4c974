/**
 * Deletes the first `n` entries of an insertion-ordered Map or Set: its least recently inserted.
 * A walk from a table's start steps over every entry deleted since the table last compacted, so a
 * bounded table that forgets one entry per insertion pays such a walk on every insertion; one
 * that forgets a share of itself at once pays it once per share.
 */
export function forgetOldest<K>(table: { keys(): IterableIterator<K>; delete(key: K): boolean }, n: number): void {
  let left = n;
  if (left <= 0) return;
  for (const key of table.keys()) {
    table.delete(key);
    if (--left === 0) return;
  }
}
