import { buildPipeline, buildUsagePipeline } from "../src/hooks/index.ts";
import type { HookPipeline } from "../src/hooks/types.ts";
import { parseConfig, TOML_TABLE, type ResolvedConfig, type ResolvedGroup } from "../src/config/load.ts";
import { reachProblems } from "../src/config/upstream-access.ts";
import type { Env } from "./env.ts";
import type { FleetView } from "./fleet.ts";

/** The gateway's settings from KVGATE_CONFIG, with the fleet's groups (from the registry) in place of the config's seed. */
export type LoadedConfig = ResolvedConfig;

export type Loaded = { ok: true; config: ResolvedConfig } | { ok: false; error: string };

let cached: { raw: string; result: Loaded } | null = null;

/**
 * The isolate's config, parsed and validated once per distinct KVGATE_CONFIG value (an isolate
 * serves one deployment, so in practice once per isolate).
 */
export function loadConfig(env: Env): Loaded {
  const raw = env.KVGATE_CONFIG;
  if (cached && cached.raw === raw) return cached.result;
  let result: Loaded;
  if (typeof raw === "object" && raw !== null) {
    result = { ok: false, error: `KVGATE_CONFIG ${TOML_TABLE}` };
    console.error(`kvgate: ${result.error}`);
  } else if (typeof raw !== "string" || raw.trim() === "") {
    result = { ok: false, error: "KVGATE_CONFIG is not set" };
  } else {
    let parsed: Loaded = parseConfig(raw);
    // Bindings and secrets the config's deployments name must be there now, not at their first request.
    const unreachable = parsed.ok ? reachProblems(parsed.config.groups, env, parsed.config.gatewayKeys) : [];
    if (unreachable.length > 0) parsed = { ok: false, error: `config: ${unreachable.join("; ")}` };
    if (!parsed.ok) console.error(`kvgate: ${parsed.error}`);
    result = parsed;
  }
  cached = { raw, result };
  return result;
}

/** The settings with the fleet's groups. */
export function withFleet(config: ResolvedConfig, fleet: FleetView): LoadedConfig {
  return { ...config, groups: fleet.groups, byModel: fleet.byModel };
}

const pipelines = new WeakMap<ResolvedGroup, HookPipeline>();
const usagePipelines = new WeakMap<ResolvedGroup, HookPipeline>();

/** A group's hooks, built once per version of the group this isolate sees; with usage accounting first for a key that counts tokens. */
export function pipelineFor(group: ResolvedGroup, readsUsage = false): HookPipeline {
  const cache = readsUsage ? usagePipelines : pipelines;
  let p = cache.get(group);
  if (!p) cache.set(group, (p = readsUsage ? buildUsagePipeline(group.hooks) : buildPipeline(group.hooks)));
  return p;
}
