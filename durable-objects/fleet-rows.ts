import { ownRow, type DeploymentRecord, type GroupRecord, type Writes } from "../src/fleet/registry.ts";
import { ORDER_GAP, positionsToWrite } from "../src/fleet/stored-order.ts";

/**
 * The fleet registry's SQLite tables: a group's own row (its settings and the rest of its record
 * but its deployments) and one row per deployment, each at its position in its list. A heartbeat
 * renewing a server writes that server's row alone: a group of a thousand self-registering
 * servers is no longer a row of hundreds of KB rewritten at each of their heartbeats.
 *
 * Releases before stored each group whole, deployments included, as one row of `groups`, which
 * is all they read. This one takes those rows when it first starts, and keeps `groups` as they
 * would have it, in the transaction of each write: a group's row there is rewritten whole when
 * anything of the group but a server's expiry changes (rare: a registration, a drain, a PATCH, a
 * removal, a new TTL), and for renewals at most once per slot of the group (renewalDue), so a
 * rollback finds every change and no server lapsed that renews within ¾ of its TTL (which the
 * release before would drain, then remove). Triggers note each group a release before writes
 * there, and the next start of this one takes those groups from it again (a group it removed
 * goes); those this one wrote itself are cleared from that note in the same transaction.
 */
export class FleetRows {
  private readonly storage: DurableObjectStorage;
  private readonly sql: SqlStorage;
  /** The positions stored: of each group, and of each group's deployments. */
  private readonly groupAt = new Map<string, number>();
  private readonly deploymentAt = new Map<string, Map<string, number>>();
  /** The revision and seed hash stored: a write that changes neither writes no meta row. */
  private rev: number;
  private seedHash: string | null;
  /** Of each group whose row of `groups` was written since this start, what that row holds (renewalDue). A group not here has its row rewritten at its next renewal. */
  private readonly whole = new Map<string, WholeRow>();

  constructor(storage: DurableObjectStorage, stored: { rev: number; seedHash: string | null }) {
    this.storage = storage;
    this.sql = storage.sql;
    this.rev = stored.rev;
    this.seedHash = stored.seedHash;
  }

  /** The groups stored, in their order, each with its deployments in theirs, once those a release before wrote are taken. */
  load(): GroupRecord[] {
    return this.storage.transactionSync(() => {
      for (const statement of TABLES) this.sql.exec(statement);
      const [layout] = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = ?", LAYOUT).toArray();
      // The first start of this layout: every group a release before stored is to be taken.
      if (!layout) this.sql.exec("INSERT OR IGNORE INTO groups_written (name) SELECT name FROM groups ORDER BY pos");
      const took = this.takeWritten();
      const listed = new Map<string, DeploymentRecord[]>();
      for (const r of this.sql.exec<{ grp: string; id: string; record: string; pos: number }>("SELECT grp, id, record, pos FROM fleet_deployments ORDER BY grp, pos")) {
        const list = listed.get(r.grp) ?? [];
        list.push(JSON.parse(r.record) as DeploymentRecord);
        listed.set(r.grp, list);
        this.positions(r.grp).set(r.id, r.pos);
      }
      const groups = this.sql
        .exec<{ name: string; record: string; pos: number }>("SELECT name, record, pos FROM fleet_groups ORDER BY pos")
        .toArray()
        .map((r) => {
          this.groupAt.set(r.name, r.pos);
          return { ...(JSON.parse(r.record) as Omit<GroupRecord, "deployments">), deployments: listed.get(r.name) ?? [] };
        });
      const names = groups.map((g) => g.settings.name);
      if (layout?.v !== KEPT) {
        // Until now `groups` held what a release before left there (fbe621b's layout, "rows", wrote
        // it at its first start and never again; a new object, nothing): written whole, once.
        this.sql.exec("DELETE FROM groups");
        const now = Date.now();
        for (const [i, g] of groups.entries()) this.writeWhole(g, i, now);
        this.sql.exec("INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", LAYOUT, KEPT);
        this.sql.exec("DELETE FROM groups_written");
      } else if (took) {
        // A group the release before added was placed after the others: its place there too.
        this.placeWhole(names);
        this.sql.exec("DELETE FROM groups_written");
      }
      return groups;
    });
  }

  /**
   * Each group a release before wrote in `groups` (in the order it was written down), as it left
   * it there: stored in this layout, at its place when it had one, else after the others; one it
   * removed goes.
   */
  private takeWritten(): boolean {
    const names = this.sql.exec<{ name: string }>("SELECT name FROM groups_written ORDER BY rowid").toArray();
    if (names.length === 0) return false;
    let last = this.sql.exec<{ pos: number | null }>("SELECT max(pos) AS pos FROM fleet_groups").one().pos;
    for (const { name } of names) {
      const [row] = this.sql.exec<{ record: string }>("SELECT record FROM groups WHERE name = ?", name).toArray();
      this.sql.exec("DELETE FROM fleet_deployments WHERE grp = ?", name);
      if (!row) {
        this.sql.exec("DELETE FROM fleet_groups WHERE name = ?", name);
        continue;
      }
      const g = JSON.parse(row.record) as GroupRecord;
      const [had] = this.sql.exec<{ pos: number }>("SELECT pos FROM fleet_groups WHERE name = ?", name).toArray();
      const pos = had?.pos ?? (last = last === null ? 0 : last + ORDER_GAP);
      this.sql.exec("INSERT INTO fleet_groups (name, record, pos) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET record = excluded.record", name, JSON.stringify(ownRow(g)), pos);
      for (const [i, d] of g.deployments.entries()) this.sql.exec("INSERT INTO fleet_deployments (grp, id, record, pos) VALUES (?, ?, ?, ?)", name, d.spec.id, JSON.stringify(d), i * ORDER_GAP);
    }
    this.sql.exec("DELETE FROM groups_written");
    return true;
  }

  /**
   * Writes what `w` says changed, in one transaction: the meta rows when they changed, each group's
   * own row and deployment rows that changed or moved, and the rows of what went; and the row of
   * `groups` of each group whose renewals it lags at the end of their slot (`group`: the fleet's
   * record of it). `names`: the groups in their order; `now`: epoch ms; `alongside`: the caller's
   * own rows to write in the same transaction.
   */
  write(w: Writes, names: readonly string[], now: number, group: (name: string) => GroupRecord | undefined, alongside?: () => void): void {
    try {
      this.storage.transactionSync(() => {
        this.writeRows(w, names, now, group);
        alongside?.();
      });
    } catch (e) {
      // Nothing of it was stored: the positions held are to be those that were, and each group's
      // row of `groups` is as good as unknown (rewritten at its next renewal).
      this.readPositions();
      this.whole.clear();
      throw e;
    }
    this.rev = w.rev;
    if (w.seedHash !== null) this.seedHash = w.seedHash;
  }

  /** When the row of `groups` of a group is next to be rewritten though no renewal comes (the alarm's write does it), or null. */
  rewriteDue(): number | null {
    let due: number | null = null;
    for (const held of this.whole.values()) if (held.dueAt !== null && (due === null || held.dueAt < due)) due = held.dueAt;
    return due;
  }

  private writeRows(w: Writes, names: readonly string[], now: number, group: (name: string) => GroupRecord | undefined): void {
    if (w.rev !== this.rev) this.sql.exec("INSERT INTO meta (k, v) VALUES ('rev', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", String(w.rev));
    if (w.seedHash !== null && w.seedHash !== this.seedHash) this.sql.exec("INSERT INTO meta (k, v) VALUES ('seed', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", w.seedHash);
    let wroteWhole = w.deleted.length > 0;
    for (const n of w.deleted) {
      this.sql.exec("DELETE FROM fleet_groups WHERE name = ?", n);
      this.sql.exec("DELETE FROM fleet_deployments WHERE grp = ?", n);
      this.sql.exec("DELETE FROM groups WHERE name = ?", n);
      this.groupAt.delete(n);
      this.deploymentAt.delete(n);
      this.whole.delete(n);
    }
    const index = new Map(names.map((n, i) => [n, i]));
    for (const g of w.put) {
      const name = g.settings.name;
      const rows = w.rows.get(name) ?? { own: false, deployments: new Set<string>(), renewed: new Set<string>() };
      const listMoved = this.writeDeployments(g, rows.deployments);
      // Anything but a renewal, or a renewal the row of `groups` is to follow now.
      if (rows.own || listMoved || rows.deployments.size > rows.renewed.size || this.renewalDue(g, rows.renewed, now)) {
        this.writeWhole(g, index.get(name) as number, now);
        wroteWhole = true;
      }
    }
    // Renewals a group's row lags, at the end of their slot though none came since.
    for (const [name, held] of this.whole) {
      const g = held.dueAt !== null && held.dueAt <= now ? group(name) : undefined;
      if (!g) continue;
      this.writeWhole(g, index.get(name) as number, now);
      wroteWhole = true;
    }
    const moved = positionsToWrite(names, this.groupAt);
    // A group gone, added or moved: the places in `groups` of those after it change too.
    if (w.deleted.length > 0 || moved.size > 0) {
      this.placeWhole(names);
      wroteWhole = true;
    }
    for (const g of w.put) {
      const name = g.settings.name;
      if (!(w.rows.get(name)?.own ?? false)) continue;
      const pos = moved.get(name) ?? (this.groupAt.get(name) as number);
      this.sql.exec("INSERT INTO fleet_groups (name, record, pos) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET record = excluded.record, pos = excluded.pos", name, JSON.stringify(ownRow(g)), pos);
      this.groupAt.set(name, pos);
      moved.delete(name);
    }
    for (const [name, pos] of moved) {
      this.sql.exec("UPDATE fleet_groups SET pos = ? WHERE name = ?", pos, name);
      this.groupAt.set(name, pos);
    }
    // This release's own writes to `groups`, which the triggers noted: not to be taken back at its
    // next start. Every name noted is one of them: the table was emptied at this start, and no
    // other release runs this object meanwhile (one instance of a Durable Object at a time).
    if (wroteWhole) this.sql.exec("DELETE FROM groups_written");
  }

  /**
   * Group `g` whole, as a release before stores it, at `pos`, its place in the fleet's order (the
   * index a release before writes). Noted in `groups_written` by the triggers: the caller clears it.
   */
  private writeWhole(g: GroupRecord, pos: number, now: number): void {
    const name = g.settings.name;
    const record = JSON.stringify(g);
    // Not an upsert: its ON CONFLICT would override the triggers' OR IGNORE, and the update
    // trigger's second insert of the same name would then fail.
    if (this.sql.exec("UPDATE groups SET record = ?, pos = ? WHERE name = ?", record, pos, name).rowsWritten === 0) {
      this.sql.exec("INSERT INTO groups (name, record, pos) VALUES (?, ?, ?)", name, record, pos);
    }
    const ttls = g.deployments.flatMap((d) => (d.ttlMs === null ? [] : [d.ttlMs]));
    this.whole.set(name, { at: now, slotMs: ttls.length === 0 ? null : Math.min(...ttls) / 4, expiry: new Map(g.deployments.map((d) => [d.spec.id, d.expiresAt])), dueAt: null });
  }

  /** Each group's row of `groups` at its index in `names`, the fleet's order: only those elsewhere are written. */
  private placeWhole(names: readonly string[]): void {
    for (const [i, name] of names.entries()) this.sql.exec("UPDATE groups SET pos = ? WHERE name = ? AND pos IS NOT ?", i, name, i);
  }

  /**
   * Whether a renewal of the servers `renewed` of `g` rewrites its row of `groups` now. The row lags
   * a renewal when the expiry it holds for the server could pass before the server's next
   * heartbeat (due within ¾ of its TTL). Such renewals are taken at most once per slot of the
   * group, a quarter of its servers' shortest TTL from its last rewrite (which takes every
   * server's expiry): a renewal in the slot only marks the row due at its end, where the first
   * renewal after, or else the alarm's write (rewriteDue), rewrites it. The expiry held then is at
   * least a quarter TTL past the lagging heartbeat, so it never passes for a server whose heartbeats
   * come within ¾ of its TTL; and servers renewing every few seconds rewrite a group of thousands
   * once per slot, not each at its own renewal. A row not known since this start is rewritten at once.
   */
  private renewalDue(g: GroupRecord, renewed: ReadonlySet<string>, now: number): boolean {
    if (renewed.size === 0) return false;
    const held = this.whole.get(g.settings.name);
    if (!held) return true;
    if (held.dueAt !== null && held.dueAt <= now) return true;
    const slotMs = held.slotMs;
    if (slotMs === null) return true;
    let lags = false;
    for (const d of g.deployments) {
      if (!renewed.has(d.spec.id)) continue;
      const was = held.expiry.get(d.spec.id);
      if (was === undefined || was === null || d.expiresAt === null || d.ttlMs === null) return true;
      // d.expiresAt - d.ttlMs / 4: ¾ of a TTL from this heartbeat.
      if (was < d.expiresAt - d.ttlMs / 4) lags = true;
    }
    if (!lags) return false;
    const end = held.at + slotMs;
    if (now >= end) return true;
    held.dueAt = end;
    return false;
  }

  private readPositions(): void {
    this.groupAt.clear();
    this.deploymentAt.clear();
    for (const r of this.sql.exec<{ name: string; pos: number }>("SELECT name, pos FROM fleet_groups")) this.groupAt.set(r.name, r.pos);
    for (const r of this.sql.exec<{ grp: string; id: string; pos: number }>("SELECT grp, id, pos FROM fleet_deployments")) this.positions(r.grp).set(r.id, r.pos);
  }

  /** Of one group's deployments: the rows of those whose record changed or whose place moved, and of those gone; whether the list did (one gone, new or moved). */
  private writeDeployments(g: GroupRecord, changed: ReadonlySet<string>): boolean {
    const name = g.settings.name;
    const at = this.positions(name);
    const ids = g.deployments.map((d) => d.spec.id);
    const listed = new Set(ids);
    let gone = false;
    for (const id of [...at.keys()]) {
      if (listed.has(id)) continue;
      this.sql.exec("DELETE FROM fleet_deployments WHERE grp = ? AND id = ?", name, id);
      at.delete(id);
      gone = true;
    }
    const moved = positionsToWrite(ids, at);
    for (const d of g.deployments) {
      const id = d.spec.id;
      const pos = moved.get(id);
      if (changed.has(id) || !at.has(id)) {
        this.sql.exec("INSERT INTO fleet_deployments (grp, id, record, pos) VALUES (?, ?, ?, ?) ON CONFLICT (grp, id) DO UPDATE SET record = excluded.record, pos = excluded.pos", name, id, JSON.stringify(d), pos ?? (at.get(id) as number));
      } else if (pos !== undefined) {
        this.sql.exec("UPDATE fleet_deployments SET pos = ? WHERE grp = ? AND id = ?", pos, name, id);
      }
      if (pos !== undefined) at.set(id, pos);
    }
    return gone || moved.size > 0;
  }

  private positions(group: string): Map<string, number> {
    let at = this.deploymentAt.get(group);
    if (!at) this.deploymentAt.set(group, (at = new Map()));
    return at;
  }
}

/** What a group's row of `groups` holds, as this start last wrote it. */
interface WholeRow {
  /** When it was written (epoch ms). */
  at: number;
  /** A quarter of the shortest TTL of its servers: renewals it lags rewrite it once per slot this long. Null: no server registers itself. */
  slotMs: number | null;
  /** The expiry it holds for each deployment. */
  expiry: Map<string, number | null>;
  /** When it is to be rewritten, a renewal it lags having come in its slot (the slot's end); or null. */
  dueAt: number | null;
}

/** The meta row saying the fleet is stored in this layout (FleetRows), its groups taken from `groups` once. */
const LAYOUT = "layout";
/**
 * Its value once `groups` is kept as a release before reads it (written whole at that start):
 * "rows", fbe621b's, left it as at its first start.
 */
const KEPT = "rows+groups";

const TABLES = [
  // The releases before's: each group whole, kept for a rollback (FleetRows.writeWhole).
  "CREATE TABLE IF NOT EXISTS groups (name TEXT PRIMARY KEY, record TEXT NOT NULL, pos INTEGER NOT NULL)",
  "CREATE TABLE IF NOT EXISTS fleet_groups (name TEXT PRIMARY KEY, record TEXT NOT NULL, pos INTEGER NOT NULL) WITHOUT ROWID",
  "CREATE TABLE IF NOT EXISTS fleet_deployments (grp TEXT NOT NULL, id TEXT NOT NULL, record TEXT NOT NULL, pos INTEGER NOT NULL, PRIMARY KEY (grp, id)) WITHOUT ROWID",
  // The groups a release before wrote in `groups` since this one last took them (a rollback, then a deploy forward again).
  "CREATE TABLE IF NOT EXISTS groups_written (name TEXT PRIMARY KEY)",
  "CREATE TRIGGER IF NOT EXISTS groups_inserted AFTER INSERT ON groups BEGIN INSERT OR IGNORE INTO groups_written (name) VALUES (NEW.name); END",
  "CREATE TRIGGER IF NOT EXISTS groups_updated AFTER UPDATE ON groups BEGIN INSERT OR IGNORE INTO groups_written (name) VALUES (OLD.name); INSERT OR IGNORE INTO groups_written (name) VALUES (NEW.name); END",
  "CREATE TRIGGER IF NOT EXISTS groups_deleted AFTER DELETE ON groups BEGIN INSERT OR IGNORE INTO groups_written (name) VALUES (OLD.name); END",
];
