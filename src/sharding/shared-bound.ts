/** A table under a SharedBound: what it holds of the bound's measure, and how it forgets. */
export interface SharingTable {
  readonly held: number;
  /**
   * Forgets its least recently used entries, an eighth of what it holds (one at least), taking them
   * off the bound's `held`; it may stop sooner once `over()` is false.
   */
  shed(over: () => boolean): void;
}

/**
 * One bound on the entries of several tables — one kind of table of each of the isolate's sharded
 * groups (ShardChoice) — so that what an isolate holds for them is one bound however many groups
 * there are. The tables' owners count what they add and forget in `held`; when a table would take
 * it past the bound, the table holding most forgets its least recently used entries. One table
 * alone forgets as it would under a bound of its own; tables as busy as each other come to share
 * the bound evenly, and a busy group keeps what quiet ones leave. A share fixed for each group
 * would cap a busy one at 1/N of the bound while the other N − 1 sat idle, and one LRU order over
 * every group would let a busy group's new prompts push out a quieter one's conversations whole.
 */
export class SharedBound {
  held = 0;
  readonly max: number;
  private readonly tables = new Set<SharingTable>();
  private readonly full = (): boolean => this.held >= this.max;

  constructor(max: number) {
    this.max = max;
  }

  /** Room for one more entry: a table forgets when the bound is reached. */
  roomForOne(): void {
    if (this.held >= this.max) this.makeRoom(this.full);
  }

  join(table: SharingTable): void {
    this.tables.add(table);
  }

  /** `table` is dropped with what it holds (its group is no longer a sharded group of the fleet). */
  leave(table: SharingTable): void {
    if (this.tables.delete(table)) this.held -= table.held;
  }

  /**
   * While `over()`, the table holding most forgets its least recently used entries. A table that
   * forgets nothing is passed over: what it holds may be an entry its owner is adding.
   */
  makeRoom(over: () => boolean): void {
    let spent: Set<SharingTable> | undefined;
    while (over()) {
      let most: SharingTable | undefined;
      for (const t of this.tables) if (!spent?.has(t) && (most === undefined || t.held > most.held)) most = t;
      if (most === undefined || most.held === 0) return;
      const held = most.held;
      most.shed(over);
      if (most.held === held) (spent ??= new Set()).add(most);
    }
  }
}
