import { DeploymentSchema, GroupSettingsSchema, type DeploymentConfig, type GroupSettings } from "../config/schema.ts";
import { MIN_LEASE_TTL_MS } from "../routing/lease-book.ts";

/**
 * A group's settings and deployment specs as stored hold what the release that wrote them filled
 * in. A setting a later release adds, with its default, is not among them: the upgrade takes no
 * seed again (FleetRegistry.seed), and an API-made group was never seeded. These give a stored
 * record each setting it lacks, with the default a config that leaves the setting out has, so
 * that routing never reads one as undefined.
 */

/**
 * A stored group's settings, with every setting it lacks at its default, and a leaseTtlMs stored
 * below the floor (taken before there was one) at the floor: below it a running request loses its
 * slot (src/routing/lease-book.ts), and kept, the group's settings fail the check every admin
 * change to it (of any field) and a fleet export applied again are put through.
 */
export function settingsWithDefaults(stored: GroupSettings): GroupSettings {
  const safe = stored.leaseTtlMs < MIN_LEASE_TTL_MS ? { ...stored, leaseTtlMs: MIN_LEASE_TTL_MS } : stored;
  return withDefaults(GroupSettingsSchema, safe, () => GroupSettingsSchema.parse({ name: "defaults" }));
}

/** A stored deployment's spec, with every setting it lacks at its default. */
export function specWithDefaults<S extends DeploymentConfig & { id: string }>(stored: S): S {
  // The schema takes a spec without an id; a stored one always has its own.
  return { ...withDefaults(DeploymentSchema, stored, () => DeploymentSchema.parse({ baseUrl: "http://defaults.invalid", model: "defaults" })), id: stored.id } as S;
}

interface Parses<T> {
  safeParse(value: unknown): { success: true; data: T } | { success: false };
}

/**
 * The stored value as the schema parses it (defaults filled in, nested ones too). One stored
 * before a rule it breaks (the registry keeps such records, and says what it must of them at
 * load) does not parse: it gets the defaults of the settings at its top level it lacks, from a
 * value that parses whatever was stored (`minimal`), and keeps every value it has.
 */
function withDefaults<T extends object>(schema: Parses<T>, stored: T, minimal: () => T): T {
  const parsed = schema.safeParse(stored);
  return parsed.success ? parsed.data : { ...minimal(), ...stored };
}
