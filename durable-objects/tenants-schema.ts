import { dayOf } from "../src/tenants/period.ts";

/**
 * The tenants object's tables, and the steps that bring an object made by an older kvgate to
 * them. Every object, new or old, goes the same way: the first tables, then each step it has not
 * run (the version it reached is stored), each in one transaction with its backfill, so an object
 * stopped halfway starts the step again from where it was.
 */

const FIRST_TABLES = [
  // carried_*: usage of rows pruned since the key was made (kept in `spend` from version 1; the columns stay for the release before).
  `CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, record TEXT NOT NULL, created_at INTEGER NOT NULL,
    carried_tokens INTEGER NOT NULL DEFAULT 0, carried_cost_micros INTEGER NOT NULL DEFAULT 0)`,
  // The list's order: a page is one range read from its cursor, not a sort of every key.
  "CREATE INDEX IF NOT EXISTS keys_by_age ON keys (created_at, id)",
  // The primary key's order is the (key, day) index a page of usage reads a range of.
  `CREATE TABLE IF NOT EXISTS usage (
    key TEXT NOT NULL, day TEXT NOT NULL, model TEXT NOT NULL, backend TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL, cost_micros INTEGER NOT NULL,
    PRIMARY KEY (key, day, model, backend)) WITHOUT ROWID`,
  // Each routing object's last batch stored: it sends one batch at a time, again (under its id)
  // until an answer comes, so one sent again after its answer was lost is not added twice.
  "CREATE TABLE IF NOT EXISTS senders (name TEXT PRIMARY KEY, last_batch TEXT NOT NULL, at INTEGER NOT NULL) WITHOUT ROWID",
  "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
];

type Step = (sql: SqlStorage, now: number) => void;

const STEPS: Step[] = [
  // 1: each key's spend as running totals, per period (`total`, a month YYYY-MM, a day
  // YYYY-MM-DD), added to in the transaction that stores the usage: a lookup reads one row where
  // it summed the key's whole history (3,000 rows for a key 300 days old on 10 backends). The
  // totals start from the usage kept and what was carried from pruned rows; only the current
  // month's and day's rows matter (older periods are never asked for again).
  (sql, now) => {
    sql.exec("CREATE TABLE spend (key TEXT NOT NULL, period TEXT NOT NULL, tokens INTEGER NOT NULL, cost_micros INTEGER NOT NULL, PRIMARY KEY (key, period)) WITHOUT ROWID");
    sumSpend(sql, now);
    // The carried columns stay, unused: the release before reads them, and a rollback to it must
    // not find every key lookup failing (its totals then miss only usage pruned since).
  },
  // 2: a key's revocation and expiry as columns beside its record, so the list can be asked for
  // one status a page at a time: the keys not revoked (active or expired) and the revoked ones each
  // have their own index in the list's order, so 10,000 revoked keys are not read for a page of
  // the few active ones.
  (sql) => {
    sql.exec("ALTER TABLE keys ADD COLUMN revoked_at INTEGER");
    sql.exec("ALTER TABLE keys ADD COLUMN expires_at INTEGER");
    copyStatuses(sql);
    sql.exec("CREATE INDEX keys_revoked_by_age ON keys (created_at, id) WHERE revoked_at IS NOT NULL");
    sql.exec("CREATE INDEX keys_unrevoked_by_age ON keys (created_at, id) WHERE revoked_at IS NULL");
  },
  // 3: what an earlier release writes (a rollback to it, then this release again) is kept in
  // `spend` and the status columns too. A release before step 1 writes usage without adding to
  // `spend`, one before step 2 key records without their columns, and nothing read them again: a
  // key with a $100 monthly budget that spent $40 while rolled back could spend $140 that month, and
  // a key it revoked was listed as active for good. Triggers live in the database, so every
  // release's writes fire them.
  // - A key record whose columns do not say what it does gets them (this release's write() sets
  //   them, so its own writes fire nothing more).
  // - Spend is not added per usage row: every release since step 1 adds each batch to `spend`
  //   itself, so a trigger adding it too would count it twice after a rollback to one of those.
  //   Instead `spend_check` notes usage written with no spend after it: a usage write sets `dirty`,
  //   a spend write clears it. Those releases write a batch's usage rows, then its spend rows, in
  //   one transaction, so `dirty` is 0 after each batch; a release before step 1 leaves it 1, and
  //   the next start sums `spend` again (spendChecked). The WHEREs make a batch write spend_check
  //   twice in all (a row read per row it writes), not once a usage row.
  // The step also fills both again from what is stored, for a rollback that came before it.
  (sql, now) => {
    const keyColumns = `UPDATE keys SET revoked_at = json_extract(NEW.record, '$.revokedAt'), expires_at = json_extract(NEW.record, '$.expiresAt') WHERE id = NEW.id`;
    const columnsWrong = `NEW.revoked_at IS NOT json_extract(NEW.record, '$.revokedAt') OR NEW.expires_at IS NOT json_extract(NEW.record, '$.expiresAt')`;
    sql.exec(`CREATE TRIGGER keys_statuses_on_insert AFTER INSERT ON keys WHEN ${columnsWrong} BEGIN ${keyColumns}; END`);
    sql.exec(`CREATE TRIGGER keys_statuses_on_update AFTER UPDATE OF record ON keys WHEN ${columnsWrong} BEGIN ${keyColumns}; END`);
    sql.exec("CREATE TABLE spend_check (dirty INTEGER NOT NULL)");
    sql.exec("INSERT INTO spend_check (dirty) VALUES (0)");
    for (const [table, dirty, was] of [["usage", 1, 0], ["spend", 0, 1]] as const) {
      for (const event of ["INSERT", "UPDATE"]) {
        sql.exec(`CREATE TRIGGER ${table}_${event.toLowerCase()}_checks_spend AFTER ${event} ON ${table} BEGIN UPDATE spend_check SET dirty = ${dirty} WHERE dirty = ${was}; END`);
      }
    }
    copyStatuses(sql);
    sumSpend(sql, now);
  },
  // 4: the keys not revoked indexed with their expiry too, so a page of one status (active or
  // expired) tells an expired key from a live one in the index and reads neither the other
  // status's rows nor their records (up to ~70 KB each): short-lived keys pile up expired. It
  // replaces step 2's index of the same keys in the same order: every query that read it reads this
  // one in its stead, a release before's too (none names an index). Built from the rows there; "if"
  // because an object whose version was set back (test/workers/key-spend.test.ts) keeps its indexes.
  (sql) => {
    sql.exec("CREATE INDEX IF NOT EXISTS keys_unrevoked_by_age_expiry ON keys (created_at, id, expires_at) WHERE revoked_at IS NULL");
    sql.exec("DROP INDEX IF EXISTS keys_unrevoked_by_age");
  },
];

/**
 * Each key's spend summed from the usage kept (and carried, from rows a release before step 1
 * pruned). This month's and today's are exact (no row of them is pruned yet). The total kept
 * first gains what this month's sum finds over the month kept — the usage a release before step 1
 * wrote alone this month — and is then the larger of that and the sum, both lower bounds: this
 * release prunes rows without carrying them, so the sum misses those (a key's usage of 400 days
 * ago outweighed what was written while rolled back, which the larger alone left out), and the
 * total kept misses what was written alone in an earlier month; neither counts a row twice.
 */
function sumSpend(sql: SqlStorage, now: number): void {
  const today = dayOf(now);
  const month = today.slice(0, 7);
  const summed = "SUM(prompt_tokens + completion_tokens), SUM(cost_micros)";
  const set = "ON CONFLICT (key, period) DO UPDATE SET tokens = excluded.tokens, cost_micros = excluded.cost_micros";
  sql.exec(
    `INSERT INTO spend (key, period, tokens, cost_micros)
     SELECT u.key, 'total', max(0, u.tokens - coalesce(s.tokens, 0)), max(0, u.cost - coalesce(s.cost_micros, 0))
     FROM (SELECT key, SUM(prompt_tokens + completion_tokens) AS tokens, SUM(cost_micros) AS cost FROM usage WHERE day >= ? GROUP BY key) AS u
     LEFT JOIN spend AS s ON s.key = u.key AND s.period = ?
     WHERE u.tokens > coalesce(s.tokens, 0) OR u.cost > coalesce(s.cost_micros, 0)
     ON CONFLICT (key, period) DO UPDATE SET tokens = tokens + excluded.tokens, cost_micros = cost_micros + excluded.cost_micros`,
    `${month}-01`,
    month,
  );
  sql.exec(
    `INSERT INTO spend (key, period, tokens, cost_micros)
     SELECT key, 'total', SUM(tokens), SUM(cost) FROM (
       SELECT key, SUM(prompt_tokens + completion_tokens) AS tokens, SUM(cost_micros) AS cost FROM usage GROUP BY key
       UNION ALL SELECT id, carried_tokens, carried_cost_micros FROM keys WHERE carried_tokens <> 0 OR carried_cost_micros <> 0)
     GROUP BY key
     ON CONFLICT (key, period) DO UPDATE SET tokens = max(tokens, excluded.tokens), cost_micros = max(cost_micros, excluded.cost_micros)`,
  );
  sql.exec(`INSERT INTO spend (key, period, tokens, cost_micros) SELECT key, substr(day, 1, 7), ${summed} FROM usage WHERE day >= ? GROUP BY key, substr(day, 1, 7) ${set}`, `${month}-01`);
  sql.exec(`INSERT INTO spend (key, period, tokens, cost_micros) SELECT key, day, ${summed} FROM usage WHERE day >= ? GROUP BY key, day ${set}`, today);
}

/** The status columns as the key records say. */
function copyStatuses(sql: SqlStorage): void {
  sql.exec("UPDATE keys SET revoked_at = json_extract(record, '$.revokedAt'), expires_at = json_extract(record, '$.expiresAt')");
}

/**
 * Sums `spend` again when a release before step 1 wrote usage since it was last right (step 3's
 * spend_check). Each start asks: the object restarts on every deploy and rollback, before any
 * lookup of this release.
 */
function spendChecked(storage: DurableObjectStorage, now: number): void {
  const sql = storage.sql;
  if (sql.exec<{ dirty: number }>("SELECT dirty FROM spend_check").one().dirty === 0) return;
  storage.transactionSync(() => {
    sumSpend(sql, now);
    sql.exec("UPDATE spend_check SET dirty = 0");
  });
}

/** Brings the object's tables to the latest version. */
export function migrateTenants(storage: DurableObjectStorage, now: number): void {
  const sql = storage.sql;
  for (const statement of FIRST_TABLES) sql.exec(statement);
  const [row] = sql.exec<{ version: number }>("SELECT version FROM schema_version").toArray();
  for (let version = row?.version ?? 0; version < STEPS.length; version++) {
    const step = STEPS[version] as Step;
    storage.transactionSync(() => {
      step(sql, now);
      sql.exec("DELETE FROM schema_version");
      sql.exec("INSERT INTO schema_version (version) VALUES (?)", version + 1);
    });
  }
  spendChecked(storage, now);
}
