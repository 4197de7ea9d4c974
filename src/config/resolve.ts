import type { DeploymentConfig, GroupSettings } from "./schema.ts";
import { gatewayKeyProblems, type GatewayKeys } from "./upstream-access.ts";
import { groupVersion } from "./version.ts";

/** What the operator says of a deployment: active takes requests; draining and disabled take none (in-flight ones finish). */
export const DEPLOYMENT_STATES = ["active", "draining", "disabled"] as const;
export type DeploymentState = (typeof DEPLOYMENT_STATES)[number];

export interface ResolvedDeployment {
  id: string;
  baseUrl: string;
  model: string;
  apiKeyEnv: string | undefined;
  maxInFlight: number;
  kvCapacityBlocks: number;
  prefillTokensPerSec: number;
  weight: number;
  state: DeploymentState;
  /** Names only (a binding, secrets): the fetcher and the header values are read from env by the Worker (src/config/upstream-access.ts). */
  binding?: string | undefined;
  headersFromEnv?: Record<string, string> | undefined;
  /** Present only when set to `priority`: a group that does not use it keeps the version it had before the field existed. */
  schedulingPolicy?: "priority";
}

export interface ResolvedGroup extends GroupSettings {
  deployments: ResolvedDeployment[];
  /** Hash of everything above (src/config/version.ts): what the Worker and the group's Durable Object agree on. */
  version: string;
  /**
   * The fleet registry's revision at this group's last change (0 outside the registry): of the
   * versions an object knows, the highest revision's says which servers take new requests.
   */
  rev: number;
}

/** A deployment's id: given, or its base URL's host. */
export function deploymentId(d: Pick<DeploymentConfig, "id" | "baseUrl">): string {
  return d.id ?? new URL(d.baseUrl).host;
}

/**
 * The base URL with no trailing slash (the endpoint's path brings its own), a backslash taken as
 * the slash fetch reads it as in an http(s) URL: the text's slashes alone stripped left `/llama\`
 * + `/v1/…` a `/llama//v1/…`. The rest stays as written (its host's case, its port, an IPv6
 * literal's form), as the operator's messages and the deployment's identity quote it.
 */
function asFetchReads(baseUrl: string): string {
  return baseUrl.replaceAll("\\", "/").replace(/\/+$/, "");
}

export function resolveDeployment(d: DeploymentConfig, state: DeploymentState): ResolvedDeployment {
  return {
    id: deploymentId(d),
    baseUrl: asFetchReads(d.baseUrl),
    model: d.model,
    apiKeyEnv: d.apiKeyEnv,
    maxInFlight: d.maxInFlight,
    kvCapacityBlocks: d.kvCapacityBlocks,
    prefillTokensPerSec: d.prefillTokensPerSec,
    weight: d.weight,
    state,
    binding: d.binding,
    headersFromEnv: d.headersFromEnv,
    ...(d.schedulingPolicy === "priority" ? { schedulingPolicy: "priority" as const } : {}),
  };
}

export function resolveGroup(settings: GroupSettings, deployments: ResolvedDeployment[], rev: number): ResolvedGroup {
  const settled = { ...settings, deployments };
  return { ...settled, version: groupVersion(settled), rev };
}

/** The error code of a deployment naming one of the gateway's keys, wherever it came from. */
export const GATEWAY_KEY_NAMED = "gateway_key_named";

/** A fleet-wide rule a set of groups breaks: the field (as a path) and why; `code` when the rule has its own. */
export interface FleetProblem {
  field: string;
  message: string;
  code?: string;
  /** Where `field` is: the group's index in the list, and the field within that group (`fallbacks[0]`, `deployments[1].id`). */
  group: number;
  at: string;
  /** The value is another's already (a name or alias of another group, an id of another deployment of the group): where that other has it. */
  clash?: FleetPlace;
}

/** A field of one group of a list: the group's index, and the field within it. */
export interface FleetPlace {
  group: number;
  at: string;
}

interface GroupShape {
  name: string;
  aliases: readonly string[];
  fallbacks: readonly string[];
  deployments: readonly Pick<DeploymentConfig, "id" | "baseUrl" | "apiKeyEnv" | "headersFromEnv">[];
}

/**
 * The rules no single group can check: names and aliases unique across groups and within one (an
 * alias listed twice, or the group's own name as its alias), deployment ids unique in a group,
 * fallbacks naming other groups; and no deployment naming one of the gateway's own keys (`keys`,
 * from the config's auth). One place, for the config and the registry.
 */
export function fleetProblems(groups: readonly GroupShape[], keys: GatewayKeys, where = "modelGroups"): FleetProblem[] {
  const out: FleetProblem[] = [];
  const problem = (group: number, at: string, message: string, more: Pick<FleetProblem, "code" | "clash"> = {}) => out.push({ field: `${where}[${group}].${at}`, message, group, at, ...more });
  const owner = new Map<string, FleetPlace>();
  for (const [gi, g] of groups.entries()) {
    const ids = new Map<string, number>();
    for (const [di, d] of g.deployments.entries()) {
      const id = deploymentId(d);
      const first = ids.get(id);
      if (first === undefined) ids.set(id, di);
      else problem(gi, `deployments[${di}].id`, `"${id}" is used twice in the group (set distinct ids)`, { clash: { group: gi, at: `deployments[${first}].id` } });
      for (const p of gatewayKeyProblems(d, keys)) problem(gi, `deployments[${di}].${p.field}`, p.message, { code: GATEWAY_KEY_NAMED });
    }
    for (const [ni, modelName] of [g.name, ...g.aliases].entries()) {
      const at = ni === 0 ? "name" : `aliases[${ni - 1}]`;
      const held = owner.get(modelName);
      if (!held) owner.set(modelName, { group: gi, at });
      else if (held.group !== gi) problem(gi, at, `"${modelName}" is already the name or alias of another group`, { clash: held });
      // Routing would not mind, but /v1/models lists each name a group has: the model twice.
      else problem(gi, at, `"${modelName}" ${held.at === "name" ? "is the group's own name" : "is listed twice in the group"}`, { clash: held });
    }
  }
  const names = new Set(groups.map((g) => g.name));
  for (const [gi, g] of groups.entries()) {
    for (const [fi, f] of g.fallbacks.entries()) {
      if (f === g.name || !names.has(f)) problem(gi, `fallbacks[${fi}]`, `"${f}" ${f === g.name ? "is the group itself" : "names no group"}`);
    }
  }
  return out;
}
