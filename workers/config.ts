import { buildPipeline, buildUsagePipeline } from "../src/hooks/index.ts";
import type { HookPipeline } from "../src/hooks/types.ts";
import { parseConfig, TOML_TABLE, type ResolvedConfig, type ResolvedGroup } from "../src/config/load.ts";
import { reachProblems, type ReachProblem } from "../src/config/upstream-access.ts";
import { seedHashOf } from "../src/fleet/registry.ts";
import type { Env } from "./env.ts";
import type { FleetView } from "./fleet.ts";

/** The gateway's settings from KVGATE_CONFIG, with the fleet's groups (from the registry) in place of the config's seed. */
export type LoadedConfig = ResolvedConfig;

export type Loaded = { ok: true; config: ResolvedConfig; seedLacks: SeedLacks | null } | { ok: false; error: string };

/** What the config's modelGroups name that this Worker lacks (bindings, secrets), and the hash the registry takes them under. */
export interface SeedLacks {
  hash: string;
  /** Told to whoever calls, before any key is checked: of what kind, never which (the Worker's log names them). */
  error: string;
}

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
    console.error(`kvgate: ${result.error}`);
  } else {
    const parsed = parseConfig(raw);
    if (!parsed.ok) console.error(`kvgate: ${parsed.error}`);
    result = parsed.ok ? { ok: true, config: parsed.config, seedLacks: seedLacksOf(parsed.config, env) } : parsed;
  }
  cached = { raw, result };
  return result;
}

/** What the config's deployments need of this Worker and it lacks, found once per config; the gateway's error only while the fleet has not taken them (seedError). */
function seedLacksOf(config: ResolvedConfig, env: Env): SeedLacks | null {
  if (config.seed === null) return null;
  const unreachable = reachProblems(config.groups, env, config.gatewayKeys);
  if (unreachable.length === 0) return null;
  console.error(`kvgate: config: ${unreachable.map(({ at, problem }) => `${at}.${problem.field} ${problem.message}`).join("; ")}`);
  return { hash: seedHashOf(config.seed.written), error: lackedAsTold(unreachable.map(({ problem }) => problem)) };
}

/**
 * The config error anyone may read: which bindings and secrets a deploy names are the operator's
 * to see, and a secret pasted where its name goes would be told as its name.
 */
function lackedAsTold(problems: readonly ReachProblem[]): string {
  const kinds = new Set(problems.map((p) => (p.field === "binding" ? "a Workers VPC binding" : "a secret")));
  return `config: modelGroups name ${[...kinds].join(" and ")} this Worker lacks or cannot send (the Worker's log says which: npx wrangler tail --env production; npm run check-config lists those the config reads)`;
}

/**
 * The config error of modelGroups that need of this Worker what it lacks, while the fleet has not
 * taken them: a deploy that brings them finds it at its first request, and the registry refuses
 * them (seed_refused). Once the fleet took them, the fleet is the registry's: a secret a deploy
 * takes away afterwards fails only the requests routed to a deployment that still names it
 * (attempt.ts, misconfigured), and one the fleet no longer holds (moved or removed through the
 * admin API) fails nothing.
 */
export function seedError(lacks: SeedLacks | null, fleet: FleetView): string | null {
  return lacks !== null && fleet.seed !== lacks.hash ? lacks.error : null;
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
