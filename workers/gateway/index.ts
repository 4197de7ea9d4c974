import { GatewayError } from "../../src/openai/errors.ts";
import { withConfigCors } from "./admit.ts";
import { errorAnswer } from "./error-answer.ts";
import { requestIdOf } from "./request-id.ts";
import type { ResolvedConfig } from "../../src/config/load.ts";
import { loadConfig, seedError, withFleet } from "../config.ts";
import type { Env } from "../env.ts";
import { cachedFleet, loadFleet, recentFleet, registryUnavailable, type FleetView } from "../fleet.ts";
import { buildApp } from "./app.ts";

export { ModelGroup } from "../../durable-objects/model-group.ts";
export { FleetRegistry } from "../../durable-objects/fleet-registry.ts";
export { Tenants } from "../../durable-objects/tenants.ts";

let built: { config: ResolvedConfig; fleet: FleetView; app: ReturnType<typeof buildApp> } | null = null;

export default {
  fetch(req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
    const loaded = loadConfig(env);
    if (!loaded.ok) {
      return errorAnswer(new GatewayError(500, "server_error", `gateway misconfigured: ${loaded.error}`, "config_invalid"), requestIdOf(req));
    }
    const { config, seedLacks } = loaded;
    const fleet = cachedFleet();
    if (fleet && (seedError(seedLacks, fleet) === null || !servesTheSeed(req))) return serve(config, fleet, req, env, ctx);
    // An isolate's first request reads the fleet from the registry; later ones use what it read.
    // One that says the config's lacking modelGroups are not taken is read again (at most once a
    // second): it may have been read before the registry started with this config.
    return (fleet ? recentFleet(env, fleet.groups).then(() => cachedFleet() ?? fleet) : loadFleet(env)).then(
      (f) => {
        const error = servesTheSeed(req) ? seedError(seedLacks, f) : null;
        if (error === null) return serve(config, f, req, env, ctx);
        return beforeTheApp(new GatewayError(500, "server_error", `gateway misconfigured: ${error}`, "config_invalid"), req, config);
      },
      (e: unknown) => beforeTheApp(registryUnavailable(e), req, config),
    );
  },
} satisfies ExportedHandler<Env>;

/**
 * Whether the request is one the config's groups may serve: the one a config whose modelGroups
 * lack a binding or secret answers with its error while the fleet has not taken them. Every path
 * but the operator's, so that none a client calls (vLLM's /score, /rerank and /v2/rerank outside
 * /v1, a path no route serves) is served on the fleet of a deploy before, or answered as a model
 * not found, hiding the cause. The operator's stay open to see what became of the groups: /health,
 * the admin API, /metrics and the master key's /v1/kvgate/status. (The pages are files Cloudflare
 * serves without the Worker.)
 */
function servesTheSeed(req: Request): boolean {
  const path = new URL(req.url).pathname;
  return !(path === "/health" || path === "/metrics" || path === "/v1/kvgate/status" || path.startsWith("/admin/"));
}

/** No app to answer yet: this answer says what the app's would (its request id, the config's CORS). */
function beforeTheApp(error: GatewayError, req: Request, config: ResolvedConfig): Response {
  const res = errorAnswer(error, requestIdOf(req));
  withConfigCors(res.headers, config.cors.allowedOrigins, req.headers.get("origin") ?? undefined);
  return res;
}

function serve(config: ResolvedConfig, fleet: FleetView, req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
  if (!built || built.config !== config || built.fleet !== fleet) built = { config, fleet, app: buildApp(withFleet(config, fleet)) };
  return built.app.fetch(req, env, ctx);
}
