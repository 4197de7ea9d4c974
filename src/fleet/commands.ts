import * as z from "zod/mini";
import { DEPLOYMENT_STATES } from "../config/resolve.ts";
import { addressName, DeploymentSchema, fleetName, GroupSettingsSchema, ModelGroupSchema } from "../config/schema.ts";

/**
 * What the admin API and heartbeats may ask of the fleet registry. Each input is checked whole
 * against these before anything changes, so a bad one changes nothing.
 */

/** A deployment added through the API names itself: an id is what drain, remove and the CLI address it by. */
export const NewDeploymentSchema = z.extend(DeploymentSchema, { id: addressName() });

/** What an update may change of a deployment (not its id); its state through drain, enable and disable. */
export const DeploymentPatchSchema = z.partial(z.omit(DeploymentSchema, { id: true }));

/**
 * A group's settings but its name, as an update leaves them: checked whole, once the update is
 * merged into the settings it changes (src/fleet/apply.ts).
 */
export const GroupUpdateSchema = z.omit(GroupSettingsSchema, { name: true });

export const FleetSchema = z.strictObject({ modelGroups: z.array(ModelGroupSchema) });

/**
 * The revision a change was decided at, which it may carry back: a fleet export's for its PUT, a
 * group's for a PATCH or DELETE of it or of one of its deployments. Absent, the change is made
 * whatever the fleet or the group is at.
 */
export const ReadRevSchema = z.object({ rev: z.optional(z.int().check(z.minimum(0))) });

/** Heartbeats come at least this often for a TTL: a TTL shorter than the interval would flap. */
export const HEARTBEAT_TTL_S = { min: 1, max: 3600, default: 30 } as const;

/**
 * A GPU server registering itself, again every few seconds: it takes requests while its
 * heartbeats come; a missed TTL drains it, and a second TTL without one removes it.
 */
export const HeartbeatSchema = z.strictObject({
  group: fleetName(),
  ...NewDeploymentSchema.shape,
  ttlSeconds: z._default(z.number().check(z.int(), z.minimum(HEARTBEAT_TTL_S.min), z.maximum(HEARTBEAT_TTL_S.max)), HEARTBEAT_TTL_S.default),
});

export type NewDeployment = z.output<typeof NewDeploymentSchema>;
export type GroupUpdate = z.output<typeof GroupUpdateSchema>;
export type Heartbeat = z.output<typeof HeartbeatSchema>;

export const StateSchema = z.enum(DEPLOYMENT_STATES);
