import type { ResolvedGroup } from "../config/resolve.ts";
import type { DeploymentRecord, GroupRecord, HeldAlias, RefusalStatus } from "./registry.ts";

/** What the Worker and the fleet registry's Durable Object say to each other. */

export interface FleetSnapshot {
  /** The registry's revision: every group's `rev` is at most this. */
  rev: number;
  groups: ResolvedGroup[];
  /**
   * Groups that have had more routing objects than their shards now give them (GroupRecord.objects):
   * how many. Those of the shards given up still hold requests, and counts /metrics reads, until
   * they hand them to the group's own object (FleetRegistry.handedOver).
   */
  objects?: Record<string, number>;
  /** The hash of the config's modelGroups the fleet took last (seedHashOf); null before any. */
  seed?: string | null;
}

/** A command of the admin API, checked by the Worker against src/fleet/commands.ts before it is sent. */
export type AdminCommand =
  /** `rev`: the revision the fleet was read at (GET /admin/v1/fleet's); a fleet past it is not replaced. */
  | { op: "replace"; modelGroups: unknown; rev?: unknown }
  | { op: "add-group"; group: unknown }
  /** `rev`: the group's revision the change was decided at (its GET's); a group past it is not changed. */
  | { op: "update-group"; group: string; patch: unknown; rev?: unknown }
  | { op: "remove-group"; group: string; rev?: unknown }
  | { op: "add-deployment"; group: string; deployment: unknown }
  | { op: "update-deployment"; group: string; id: string; patch: unknown; rev?: unknown }
  | { op: "set-state"; group: string; id: string; state: unknown }
  | { op: "remove-deployment"; group: string; id: string; rev?: unknown }
  | { op: "heartbeat"; heartbeat: unknown };

/**
 * The answer to a command. `rev`: the revision the command left its group at (answeredRev), the
 * fleet's for a PUT of the fleet or a group removed. `routing`: "applied" when every changed group's routing object took
 * the change before this answer (it is then in effect for every new request), and so did those of
 * the group it names that an earlier change had not reached yet (a drain sent again pushes the
 * first); "pending" when one could not be reached (its Workers bring the change along with their
 * next call), or, for a heartbeat, which pushes no earlier change, still waits for one.
 */
export type AdminResult =
  | { ok: true; rev: number; changed: string[]; removed: string[]; routing: "applied" | "pending" }
  | { ok: false; status: RefusalStatus; code: string; message: string; param: string | null };

/**
 * What became of the config's modelGroups when a deploy last changed them: taken at fleet
 * revision `rev` (without the aliases other groups held), or refused whole, the fleet staying as it
 * was (the registry tries them again each time it starts).
 */
export type SeedReport = { state: "taken"; rev: number; aliasesHeld: HeldAlias[] } | { state: "refused"; message: string; param: string | null };

export interface FleetRegistryRpc {
  snapshot(): FleetSnapshot;
  /** The registry's own records: sources, states and heartbeat expiries, and the last seed's fate (null: none told yet), for the admin API. */
  records(): { rev: number; groups: GroupRecord[]; seed: SeedReport | null };
  /** One group's record (null: no such group), for the admin API's reads of one group, which would otherwise copy the whole fleet out of the object. */
  record(name: string): GroupRecord | null;
  command(cmd: AdminCommand): Promise<AdminResult>;
}

export type { DeploymentRecord, GroupRecord };
