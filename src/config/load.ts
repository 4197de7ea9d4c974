import { allIssues } from "../zod-issues.ts";
import { parseJsonc } from "./jsonc.ts";
import { removedSetting } from "./removed.ts";
import { GatewayConfigSchema, type GatewayConfig, type ModelGroupConfig } from "./schema.ts";
import { groupVersion } from "./version.ts";

export interface ResolvedDeployment {
  id: string;
  baseUrl: string;
  model: string;
  apiKeyEnv: string | undefined;
  maxInFlight: number;
  kvCapacityBlocks: number;
  prefillTokensPerSec: number;
  /** Names only (a binding, secrets): the fetcher and the header values are read from env by the Worker (src/config/upstream-access.ts). */
  binding?: string | undefined;
  headersFromEnv?: Record<string, string> | undefined;
}

export interface ResolvedGroup extends Omit<ModelGroupConfig, "deployments"> {
  deployments: ResolvedDeployment[];
  /** Hash of everything above (src/config/version.ts): what the Worker and the group's Durable Object agree on. */
  version: string;
}

export interface ResolvedConfig extends Omit<GatewayConfig, "modelGroups"> {
  groups: ResolvedGroup[];
  /** Model name or alias → group. */
  byModel: Map<string, ResolvedGroup>;
}

/** `errors`: each problem on its own, when there are several to tell at once; `error` says them all. */
export type ConfigResult = { ok: true; config: ResolvedConfig } | { ok: false; error: string; errors?: string[] };

/** Parses (JSON, or JSON with comments) and cross-checks a config; a failure names each field and the reason. */
export function parseConfig(raw: unknown): ConfigResult {
  let input = raw;
  if (typeof raw === "string") {
    const json = parseJsonc(raw);
    if (!json.ok) return { ok: false, error: `config is not valid JSON: ${json.error}` };
    input = json.value;
  }
  const removed = removedSetting(input);
  if (removed) return { ok: false, error: `config: ${removed}` };
  const parsed = GatewayConfigSchema.safeParse(input);
  if (!parsed.success) {
    const errors = allIssues(parsed.error.issues, "the config");
    return { ok: false, error: `config: ${errors.join("; ")}`, errors };
  }
  const { modelGroups, ...rest } = parsed.data;
  const byModel = new Map<string, ResolvedGroup>();
  const groups: ResolvedGroup[] = [];
  for (const [gi, group] of modelGroups.entries()) {
    const ids = new Set<string>();
    const deployments: ResolvedDeployment[] = [];
    for (const [di, d] of group.deployments.entries()) {
      const id = d.id ?? new URL(d.baseUrl).host;
      if (ids.has(id)) {
        return { ok: false, error: `config: modelGroups[${gi}].deployments[${di}].id "${id}" is used twice in the group (set distinct ids)` };
      }
      ids.add(id);
      deployments.push({ id, baseUrl: d.baseUrl.replace(/\/+$/, ""), model: d.model, apiKeyEnv: d.apiKeyEnv, maxInFlight: d.maxInFlight, kvCapacityBlocks: d.kvCapacityBlocks, prefillTokensPerSec: d.prefillTokensPerSec, binding: d.binding, headersFromEnv: d.headersFromEnv });
    }
    const settled = { ...group, deployments };
    const resolved: ResolvedGroup = { ...settled, version: groupVersion(settled) };
    for (const [ni, modelName] of [group.name, ...group.aliases].entries()) {
      if (byModel.has(modelName)) {
        const field = ni === 0 ? `modelGroups[${gi}].name` : `modelGroups[${gi}].aliases[${ni - 1}]`;
        return { ok: false, error: `config: ${field} "${modelName}" is already the name or alias of another group` };
      }
      byModel.set(modelName, resolved);
    }
    groups.push(resolved);
  }
  const names = new Set(groups.map((g) => g.name));
  for (const [gi, g] of groups.entries()) {
    for (const [fi, f] of g.fallbacks.entries()) {
      if (f === g.name || !names.has(f)) {
        const why = f === g.name ? "is the group itself" : "names no group";
        return { ok: false, error: `config: modelGroups[${gi}].fallbacks[${fi}] "${f}" ${why}` };
      }
    }
  }
  return { ok: true, config: { ...rest, groups, byModel } };
}
