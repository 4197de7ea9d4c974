import type * as z from "zod/mini";
import { firstIssue } from "../zod-issues.ts";
import { DeploymentPatchSchema, FleetSchema, GroupUpdateSchema, HeartbeatSchema, NewDeploymentSchema, ReadRevSchema, StateSchema } from "./commands.ts";
import { isRecord, mergePatch, nullsAsAbsent, shallowPatch } from "./merge-patch.ts";
import { ModelGroupSchema, type DeploymentConfig, type ModelGroupConfig } from "../config/schema.ts";
import type { AdminCommand } from "./protocol.ts";
import { refuseRegistration, RegistryError, type Change, type FleetRegistry } from "./registry.ts";

/** Checks a command's input against its schema, then applies it; a RegistryError says why not. */
export function applyCommand(registry: FleetRegistry, cmd: AdminCommand, now: number): Change {
  switch (cmd.op) {
    case "replace":
      return registry.replace(fleetOf(registry, cmd.modelGroups), readAt(cmd.rev));
    case "add-group":
      return registry.addGroup(parse(ModelGroupSchema, cmd.group));
    case "update-group": {
      // Merged into the group's settings before the check: a nested setting's other fields are the group's, not their defaults.
      const patch = named(cmd.patch);
      return registry.updateGroup(
        cmd.group,
        ({ name: _name, ...current }) => {
          refuseUnknown(GroupUpdateSchema, mergePatch(current, nullsAsAbsent(patch)));
          return parse(GroupUpdateSchema, mergePatch(current, patch));
        },
        readAt(cmd.rev),
      );
    }
    case "remove-group":
      return registry.removeGroup(cmd.group, readAt(cmd.rev));
    case "add-deployment":
      return registry.addDeployment(cmd.group, parse(NewDeploymentSchema, cmd.deployment));
    case "update-deployment": {
      const patch = named(cmd.patch);
      // The patch alone first: each field's type, and no field a deployment has not (its id among them), taken out or not.
      parse(DeploymentPatchSchema, nullsAsAbsent(patch));
      return registry.updateDeployment(cmd.group, cmd.id, (current) => parse(NewDeploymentSchema, shallowPatch(current, patch)), readAt(cmd.rev));
    }
    case "set-state":
      return registry.setState(cmd.group, cmd.id, parse(StateSchema, cmd.state), now);
    case "remove-deployment":
      return registry.removeDeployment(cmd.group, cmd.id, readAt(cmd.rev));
    case "heartbeat":
      refuseClosed(registry, cmd.heartbeat);
      return registry.heartbeat(parse(HeartbeatSchema, cmd.heartbeat), now);
  }
}

/** The group a command names (its path's, a new group's, a heartbeat's); null for a PUT of the fleet, which names every group. */
export function groupNamed(cmd: AdminCommand): string | null {
  switch (cmd.op) {
    case "replace":
      return null;
    case "add-group":
      return stringField(cmd.group, "name");
    case "heartbeat":
      return stringField(cmd.heartbeat, "group");
    default:
      return cmd.group;
  }
}

/**
 * The revision a command made answers: its group's, which a PATCH or DELETE of the group carries
 * back as `rev`. A change of the group gives it the fleet's next revision, so both are one then; a
 * command that changed nothing (a drain sent again) leaves the group where it was, and the fleet's,
 * moved on by other groups' changes, would be refused there as a change since. A PUT of the fleet,
 * and a group removed, answer the fleet's.
 */
export function answeredRev(registry: FleetRegistry, cmd: AdminCommand): number {
  const name = groupNamed(cmd);
  return (name === null ? undefined : registry.group(name)?.rev) ?? registry.rev;
}

/** A body's field, as applyCommand found it (checked there): "" when it is none, which names no group. */
function stringField(body: unknown, field: string): string {
  const v = isRecord(body) ? body[field] : undefined;
  return typeof v === "string" ? v : "";
}

/** Only the fields `input` names that `schema` does not know: the rest is checked when the result is. */
function refuseUnknown(schema: z.ZodMiniType, input: unknown): void {
  const r = schema.safeParse(input);
  const unknown = r.success ? [] : r.error.issues.filter((i) => i.code === "unrecognized_keys");
  if (unknown.length === 0) return;
  const { param, message } = firstIssue(unknown);
  throw new RegistryError(400, "invalid_value", message, param || null);
}

function parse<S extends z.ZodMiniType>(schema: S, input: unknown): z.output<S> {
  const r = schema.safeParse(input);
  if (r.success) return r.data;
  throw refusal(r.error.issues);
}

function refusal(issues: Parameters<typeof firstIssue>[0]): RegistryError {
  const { param, message } = firstIssue(issues);
  return new RegistryError(400, tooManyDeployments(issues[0]) ? "too_many_deployments" : "invalid_value", message, param || null);
}

/**
 * The schema's cap on a group's deployments (MAX_DEPLOYMENTS), met by a group listed whole (a
 * `POST` of a group, a fleet `PUT`): answered with the code the registry gives a group grown past
 * it one deployment at a time, so a script reads one code for the one limit.
 */
function tooManyDeployments(issue: Parameters<typeof firstIssue>[0][number] | undefined): boolean {
  return issue?.code === "too_big" && issue.origin === "array" && issue.path.at(-1) === "deployments";
}

/**
 * A group closed to registration refuses a heartbeat whatever else it says (README, Heartbeats):
 * named by the body's `group`, it is refused before the rest is parsed, so a register key's holder
 * learns nothing of what the group would check (an id, a binding, a secret). The registry refuses
 * it again once parsed (FleetRegistry.heartbeat), for the heartbeats it is handed whole.
 */
function refuseClosed(registry: FleetRegistry, heartbeat: unknown): void {
  const into = registry.group(stringField(heartbeat, "group"));
  if (into) refuseRegistration(into);
}

/**
 * The groups a `PUT` of the fleet lists, checked against the schema but for a deployment listed
 * exactly as the fleet holds it (replace keeps it as it is): one stored before a rule it breaks
 * (a baseUrl ending in /v1, refused since 717f7e3) would else keep an export from applying back.
 * Only a body the schema refuses is looked through for those.
 */
function fleetOf(registry: FleetRegistry, modelGroups: unknown): ModelGroupConfig[] {
  const whole = FleetSchema.safeParse({ modelGroups });
  if (whole.success) return whole.data.modelGroups;
  const groups: unknown[] = Array.isArray(modelGroups) ? modelGroups : [];
  const listed = groups.map((g) => (isRecord(g) && Array.isArray(g.deployments) ? (g.deployments as unknown[]) : []));
  const held = new Map<string, DeploymentConfig>();
  for (const [gi, g] of groups.entries()) {
    for (const [di, d] of (listed[gi] ?? []).entries()) {
      const spec = registry.heldAs(isRecord(g) ? g.name : undefined, d);
      if (spec) held.set(`${gi}.${di}`, spec);
    }
  }
  const at = (path: readonly PropertyKey[]) => (path[0] === "modelGroups" && path[2] === "deployments" ? `${String(path[1])}.${String(path[3])}` : "");
  const refused = whole.error.issues.filter((i) => !held.has(at(i.path)));
  if (refused.length > 0) throw refusal(refused);
  const rest = groups.map((g, gi) => (isRecord(g) && Array.isArray(g.deployments) ? { ...g, deployments: g.deployments.filter((_, di) => !held.has(`${gi}.${di}`)) } : g));
  return parse(FleetSchema, { modelGroups: rest }).modelGroups.map((g, gi) => {
    let next = 0;
    return { ...g, deployments: (listed[gi] ?? []).map((_, di) => held.get(`${gi}.${di}`) ?? (g.deployments[next++] as DeploymentConfig)) };
  });
}

/** The revision a change carries back (ReadRevSchema), checked before anything is. */
function readAt(rev: unknown): number | undefined {
  return parse(ReadRevSchema, { rev }).rev;
}

/** A patch as the request gives it: an object naming at least one field (one naming none would change nothing). */
function named(input: unknown): Record<string, unknown> {
  if (!isRecord(input)) throw new RegistryError(400, "invalid_value", "body must be an object", null);
  if (Object.keys(input).length === 0) throw new RegistryError(400, "invalid_value", "the update names no field to change", null);
  return input;
}
