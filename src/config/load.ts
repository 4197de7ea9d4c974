import { firstIssue } from "../zod-issues.ts";
import { removedSetting } from "./removed.ts";
import { fleetProblems, resolveDeployment, resolveGroup, type ResolvedGroup } from "./resolve.ts";
import { GatewayConfigSchema, type GatewayConfig, type ModelGroupConfig } from "./schema.ts";

export type { DeploymentState, ResolvedDeployment, ResolvedGroup } from "./resolve.ts";

export interface ResolvedConfig extends Omit<GatewayConfig, "modelGroups"> {
  /** The config's seed groups, resolved as the registry would take them (revision 0, every deployment active). */
  groups: ResolvedGroup[];
  /** Model name or alias → group. */
  byModel: Map<string, ResolvedGroup>;
  /** The config's groups as given (defaults filled in): what the fleet registry seeds from. */
  seed: ModelGroupConfig[];
}

export type ConfigResult = { ok: true; config: ResolvedConfig } | { ok: false; error: string };

/** Parses and cross-checks a config; a failure names the field and the reason. */
export function parseConfig(raw: unknown): ConfigResult {
  let input = raw;
  if (typeof raw === "string") {
    try {
      input = JSON.parse(raw);
    } catch (e) {
      return { ok: false, error: `config is not valid JSON: ${(e as Error).message}` };
    }
  }
  const removed = removedSetting(input);
  if (removed) return { ok: false, error: `config: ${removed}` };
  const parsed = GatewayConfigSchema.safeParse(input);
  if (!parsed.success) {
    const { message } = firstIssue(parsed.error.issues);
    return { ok: false, error: `config: ${message}` };
  }
  const { modelGroups, ...rest } = parsed.data;
  const problem = fleetProblems(modelGroups)[0];
  if (problem) return { ok: false, error: `config: ${problem.field} ${problem.message}` };
  const groups = modelGroups.map(({ deployments, ...settings }) =>
    resolveGroup(
      settings,
      deployments.map((d) => resolveDeployment(d, "active")),
      0,
    ),
  );
  return { ok: true, config: { ...rest, groups, byModel: modelIndex(groups), seed: modelGroups } };
}

/** Model name or alias → group; names are unique across groups (fleetProblems). */
export function modelIndex(groups: readonly ResolvedGroup[]): Map<string, ResolvedGroup> {
  const byModel = new Map<string, ResolvedGroup>();
  for (const g of groups) for (const m of [g.name, ...g.aliases]) byModel.set(m, g);
  return byModel;
}
