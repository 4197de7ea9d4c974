import { GatewayError } from "../../src/openai/errors.ts";
import { loadConfig, type LoadedConfig } from "../config.ts";
import type { Env } from "../env.ts";
import { buildApp } from "./app.ts";

export { ModelGroup } from "../../durable-objects/model-group.ts";

let built: { config: LoadedConfig; app: ReturnType<typeof buildApp> } | null = null;

export default {
  fetch(req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
    const loaded = loadConfig(env);
    if (!loaded.ok) {
      return new GatewayError(500, "server_error", `gateway misconfigured: ${loaded.error}`, "config_invalid").toResponse();
    }
    if (!built || built.config !== loaded.config) built = { config: loaded.config, app: buildApp(loaded.config) };
    return built.app.fetch(req, env, ctx);
  },
} satisfies ExportedHandler<Env>;
