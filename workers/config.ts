import { buildPipeline } from "../src/hooks/index.ts";
import type { HookPipeline } from "../src/hooks/types.ts";
import { parseConfig, type ResolvedConfig } from "../src/config/load.ts";
import { reachProblems } from "../src/config/upstream-access.ts";
import type { Env } from "./env.ts";

export interface LoadedConfig extends ResolvedConfig {
  pipelines: Map<string, HookPipeline>;
}

export type Loaded = { ok: true; config: LoadedConfig } | { ok: false; error: string };

let cached: { raw: string; result: Loaded } | null = null;

/**
 * The isolate's config, parsed and validated once per distinct KVGATE_CONFIG value (an isolate
 * serves one deployment, so in practice once per isolate).
 */
export function loadConfig(env: Env): Loaded {
  const raw = env.KVGATE_CONFIG;
  if (cached && cached.raw === raw) return cached.result;
  let result: Loaded;
  if (typeof raw !== "string" || raw.trim() === "") {
    result = { ok: false, error: "KVGATE_CONFIG is not set" };
  } else {
    let parsed = parseConfig(raw);
    // Bindings and secrets the deployments name must be there now, not at their first request.
    const unreachable = parsed.ok ? reachProblems(parsed.config.groups, env) : [];
    if (unreachable.length > 0) parsed = { ok: false, error: `config: ${unreachable.join("; ")}`, errors: unreachable };
    if (parsed.ok) {
      const pipelines = new Map(parsed.config.groups.map((g) => [g.name, buildPipeline(g.hooks)]));
      result = { ok: true, config: { ...parsed.config, pipelines } };
    } else {
      result = parsed;
      console.error(`kvgate: ${parsed.error}`);
    }
  }
  cached = { raw, result };
  return result;
}
