import { GatewayError } from "../../src/openai/errors.ts";
import { withConfigCors } from "./admit.ts";
import { errorAnswer } from "./error-answer.ts";
import { requestIdOf } from "./request-id.ts";
import type { ResolvedConfig } from "../../src/config/load.ts";
import { loadConfig, withFleet } from "../config.ts";
import type { Env } from "../env.ts";
import { cachedFleet, loadFleet, registryUnavailable, type FleetView } from "../fleet.ts";
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
    const fleet = cachedFleet();
    if (fleet) return serve(loaded.config, fleet, req, env, ctx);
    // An isolate's first request reads the fleet from the registry; later ones use what it read.
    return loadFleet(env).then(
      (f) => serve(loaded.config, f, req, env, ctx),
      (e: unknown) => {
        // No app to answer yet: this answer says what the app's would (its request id, the config's CORS).
        const res = errorAnswer(registryUnavailable(e), requestIdOf(req));
        withConfigCors(res.headers, loaded.config.cors.allowedOrigins, req.headers.get("origin") ?? undefined);
        return res;
      },
    );
  },
} satisfies ExportedHandler<Env>;

function serve(config: ResolvedConfig, fleet: FleetView, req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
  if (!built || built.config !== config || built.fleet !== fleet) built = { config, fleet, app: buildApp(withFleet(config, fleet)) };
  return built.app.fetch(req, env, ctx);
}
