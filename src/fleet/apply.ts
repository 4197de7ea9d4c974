import type * as z from "zod/mini";
import { firstIssue } from "../zod-issues.ts";
import { DeploymentPatchSchema, ExportedRevSchema, FleetSchema, GroupUpdateSchema, HeartbeatSchema, NewDeploymentSchema, StateSchema } from "./commands.ts";
import { isRecord, mergePatch } from "./merge-patch.ts";
import { ModelGroupSchema } from "../config/schema.ts";
import type { AdminCommand } from "./protocol.ts";
import { RegistryError, type Change, type FleetRegistry } from "./registry.ts";

/** Checks a command's input against its schema, then applies it; a RegistryError says why not. */
export function applyCommand(registry: FleetRegistry, cmd: AdminCommand, now: number): Change {
  switch (cmd.op) {
    case "replace":
      return registry.replace(parse(FleetSchema, { modelGroups: cmd.modelGroups }).modelGroups, parse(ExportedRevSchema, { rev: cmd.rev }).rev);
    case "add-group":
      return registry.addGroup(parse(ModelGroupSchema, cmd.group));
    case "update-group": {
      // Merged into the group's settings before the check: a nested setting's other fields are the group's, not their defaults.
      const patch = named(cmd.patch);
      return registry.updateGroup(cmd.group, ({ name: _name, ...current }) => parse(GroupUpdateSchema, mergePatch(current, patch)));
    }
    case "remove-group":
      return registry.removeGroup(cmd.group);
    case "add-deployment":
      return registry.addDeployment(cmd.group, parse(NewDeploymentSchema, cmd.deployment));
    case "update-deployment":
      return registry.updateDeployment(cmd.group, cmd.id, given(DeploymentPatchSchema, cmd.patch));
    case "set-state":
      return registry.setState(cmd.group, cmd.id, parse(StateSchema, cmd.state), now);
    case "remove-deployment":
      return registry.removeDeployment(cmd.group, cmd.id);
    case "heartbeat":
      return registry.heartbeat(parse(HeartbeatSchema, cmd.heartbeat), now);
  }
}

function parse<S extends z.ZodMiniType>(schema: S, input: unknown): z.output<S> {
  const r = schema.safeParse(input);
  if (r.success) return r.data;
  const { param, message } = firstIssue(r.error.issues);
  throw new RegistryError(400, "invalid_value", message, param || null);
}

/**
 * A deployment's patch: only the fields the request names. (Parsing fills a field's default in
 * where it is missing, and a patch must not reset what it does not mention.) Its one object,
 * headersFromEnv, is a list of headers rather than settings, and is replaced whole.
 */
function given<S extends z.ZodMiniType>(schema: S, input: unknown): Partial<z.output<S>> {
  const parsed = parse(schema, input) as Record<string, unknown>;
  return Object.fromEntries(Object.keys(named(input)).map((k) => [k, parsed[k]])) as Partial<z.output<S>>;
}

/** A patch as the request gives it: an object naming at least one field (one naming none would change nothing). */
function named(input: unknown): Record<string, unknown> {
  if (!isRecord(input)) throw new RegistryError(400, "invalid_value", "body must be object", null);
  if (Object.keys(input).length === 0) throw new RegistryError(400, "invalid_value", "the update names no field to change", null);
  return input;
}
