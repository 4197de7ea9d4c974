import { allIssues } from "../zod-issues.ts";
import { parseJsonc } from "./jsonc.ts";
import { removedSetting } from "./removed.ts";
import { fleetProblems, resolveDeployment, resolveGroup, type ResolvedGroup } from "./resolve.ts";
import { AUTH_DEFAULTS, GatewayConfigSchema, type GatewayConfig, type ModelGroupConfig } from "./schema.ts";
import { gatewayKeyRefusal, gatewayKeys, sharedKeySecrets, type GatewayKeys } from "./upstream-access.ts";

export type { DeploymentState, ResolvedDeployment, ResolvedGroup } from "./resolve.ts";

export interface ResolvedConfig extends Omit<GatewayConfig, "modelGroups"> {
  /** The config's seed groups, resolved as the registry would take them (revision 0, every deployment active). */
  groups: ResolvedGroup[];
  /** Model name or alias → group. */
  byModel: Map<string, ResolvedGroup>;
  /**
   * What the fleet registry seeds from; null when the config leaves `modelGroups` out: such a
   * config does not manage the fleet (the admin API and `fleet apply` do), so a deploy of it
   * takes nothing away. `"modelGroups": []` does manage it: the config then has no servers.
   */
  seed: ConfigSeed | null;
  /** The names `auth` gives the gateway's own keys, which no deployment is ever sent. */
  gatewayKeys: GatewayKeys;
}

/**
 * The config's groups for the registry's seed: `groups` as given (defaults filled in), what it
 * takes; `written`, the same as the config's text wrote them, what says whether a deploy brought
 * other ones. A release that adds a setting with a default changes `groups`, never `written`.
 */
export interface ConfigSeed {
  groups: ModelGroupConfig[];
  written: unknown;
}

/** What the Worker says of a `[vars.KVGATE_CONFIG]` table, which wrangler hands it as an object where the config is one JSON text. */
export const TOML_TABLE = "is a TOML table: give it as one JSON string under [vars], KVGATE_CONFIG = '''{ … }'''";

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
  const keys = gatewayKeys(rest.auth);
  const problems = [
    ...sharedKeySecrets(rest.auth),
    ...rest.auth.registrationSecrets.flatMap((name, i) => {
      const why = gatewayKeyRefusal(name, keys);
      return why === null ? [] : [`auth.registrationSecrets[${i}] ${why}`];
    }),
    ...fleetProblems(modelGroups, keys).map((p) => `${p.field} ${p.message}`),
  ];
  if (problems.length > 0) return { ok: false, error: `config: ${problems.join("; ")}`, errors: problems };
  const groups = modelGroups.map(({ deployments, ...settings }) =>
    resolveGroup(
      settings,
      deployments.map((d) => resolveDeployment(d, "active")),
      0,
    ),
  );
  const written = (input as { modelGroups?: unknown }).modelGroups;
  const seed = written === undefined ? null : { groups: modelGroups, written };
  return { ok: true, config: { ...rest, groups, byModel: modelIndex(groups), seed, gatewayKeys: keys } };
}

/**
 * The gateway's keys by the config's names, for a Durable Object that reads no other setting of
 * it; the defaults' names when it does not parse (the Worker then serves nothing anyway).
 */
export function gatewayKeysOf(raw: unknown): GatewayKeys {
  const parsed = parseConfig(raw);
  return parsed.ok ? parsed.config.gatewayKeys : gatewayKeys(AUTH_DEFAULTS);
}

/** Model name or alias → group; names are unique across groups (fleetProblems). */
export function modelIndex<G extends { name: string; aliases: readonly string[] }>(groups: readonly G[]): Map<string, G> {
  const byModel = new Map<string, G>();
  for (const g of groups) for (const m of [g.name, ...g.aliases]) byModel.set(m, g);
  return byModel;
}
