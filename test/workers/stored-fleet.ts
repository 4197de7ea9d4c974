import type { DeploymentRecord, GroupRecord } from "../../src/fleet/registry.ts";

/** The group as the fleet registry stores it, its own row and its deployments' rows, for a test to edit; throws when it has none. */
export function storedGroup(sql: SqlStorage, name: string): GroupRecord {
  const [own] = sql.exec<{ record: string }>("SELECT record FROM fleet_groups WHERE name = ?", name).toArray();
  if (!own) throw new Error(`no stored group ${name}`);
  const deployments = sql.exec<{ record: string }>("SELECT record FROM fleet_deployments WHERE grp = ? ORDER BY pos", name).toArray().map((r) => JSON.parse(r.record) as DeploymentRecord);
  return { ...(JSON.parse(own.record) as Omit<GroupRecord, "deployments">), deployments };
}

/**
 * Stores `g` as a registry of before this layout stored a group, whole in one row of `groups`
 * (settings and deployments as that release had them): the registry takes it so when it next starts.
 */
export function storeAsBefore(sql: SqlStorage, g: { settings: { name: string }; deployments: unknown[] }): void {
  sql.exec("INSERT OR REPLACE INTO groups (name, record, pos) VALUES (?, ?, (SELECT count(*) FROM groups))", g.settings.name, JSON.stringify(g));
}

/** The registry's storage as the release before this layout left it: `groups` holding `fleet` whole, group by group, and nothing of this layout. */
export function storeFleetAsBefore(sql: SqlStorage, fleet: readonly GroupRecord[]): void {
  for (const table of ["groups", "fleet_groups", "fleet_deployments", "groups_written"]) sql.exec(`DROP TABLE IF EXISTS ${table}`);
  sql.exec("DELETE FROM meta WHERE k = 'layout'");
  sql.exec("CREATE TABLE groups (name TEXT PRIMARY KEY, record TEXT NOT NULL, pos INTEGER NOT NULL)");
  for (const [pos, g] of fleet.entries()) sql.exec("INSERT INTO groups (name, record, pos) VALUES (?, ?, ?)", g.settings.name, JSON.stringify(g), pos);
}
