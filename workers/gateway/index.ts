import { Hono } from "hono/tiny";
import { getPath } from "hono/utils/url";
import { sampleRequest, type RequestLog, type RequestLogSettings } from "../../src/logging/request-log.ts";
import { LOGGING_DEFAULTS } from "../../src/config/schema.ts";
import { GatewayError } from "../../src/openai/errors.ts";
import { corsBeforeTheApp, mountPreflight } from "./admit.ts";
import type { AppEnv } from "./app-env.ts";
import { discardUnread } from "./body.ts";
import { writesRequestLine } from "./endpoints.ts";
import { errorAnswer } from "./error-answer.ts";
import { requestIdOf } from "./request-id.ts";
import { noteAnswer } from "./request-logger.ts";
import type { ResolvedConfig } from "../../src/config/load.ts";
import { loadConfig, seedError, withFleet, type Loaded } from "../config.ts";
import type { Env } from "../env.ts";
import { cachedFleet, loadFleet, recentFleet, registryUnavailable, type FleetView } from "../fleet.ts";
import { buildApp } from "./app.ts";
import { fleetRead } from "./route-client.ts";

export { ModelGroup } from "../../durable-objects/model-group.ts";
export { FleetRegistry } from "../../durable-objects/fleet-registry.ts";
export { Tenants } from "../../durable-objects/tenants.ts";

let built: { config: ResolvedConfig; fleet: FleetView; app: ReturnType<typeof buildApp> } | null = null;
/** The app's preflight answers alone, for the config they were made for (mountPreflight). */
let preflights: { config: ResolvedConfig; app: Hono<AppEnv> } | null = null;

export default {
  fetch(req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
    const loaded = loadConfig(env);
    if (!loaded.ok) {
      // No config to say how to log or whom CORS allows: the line at the defaults a config without
      // `logging` has, so an operator watching request lines sees every request fail, not none come.
      const came = arrival(LOGGING_DEFAULTS, false, req);
      return answered(errorAnswer(new GatewayError(500, "server_error", `gateway misconfigured: ${loaded.error}`, "config_invalid"), came.requestId), req, came, ctx);
    }
    // A preflight needs no fleet: granted as the app grants it before the fleet is read or checked,
    // so that while the registry cannot be reached or the deploy lacks a secret, a page still sends
    // its request and reads the answer (a 503 to retry, the secret to set), not a CORS failure.
    if (isPreflight(req)) return grantedPreflight(loaded.config, req, env, ctx).then((granted) => granted ?? throughTheFleet(loaded, req, env, ctx));
    return throughTheFleet(loaded, req, env, ctx);
  },
} satisfies ExportedHandler<Env>;

function throughTheFleet({ config, seedLacks }: Extract<Loaded, { ok: true }>, req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
  const fleet = cachedFleet();
  if (fleet && (seedError(seedLacks, fleet) === null || !servesTheSeed(req))) return serve(config, fleet, req, env, ctx);
  const came = arrival(config.logging.requests, answeredBeforeTheLogger(config, req), req);
  // An isolate's first request reads the fleet from the registry; later ones use what it read.
  // One that says the config's lacking modelGroups are not taken is read again (at most once a
  // second): it may have been read before the registry started with this config.
  return (fleet ? recentFleet(env, ctx, fleet.groups).then(() => cachedFleet() ?? fleet) : loadFleet(env)).then(
    (f) => {
      const error = servesTheSeed(req) ? seedError(seedLacks, f) : null;
      if (error === null) return serve(config, f, req, env, ctx);
      return beforeTheApp(new GatewayError(500, "server_error", `gateway misconfigured: ${error}`, "config_invalid"), req, config, env, ctx, came);
    },
    (e: unknown) => beforeTheApp(registryUnavailable(e), req, config, env, ctx, came),
  );
}

/** A request as it came in, for an answer the gateway may give before its app: its id, and its line when it writes one. */
interface Arrival {
  requestId: string;
  log: RequestLog | null;
}

/**
 * Sampled as it comes in, as the app's logger samples it (its `time` and duration from then, the
 * registry's read included). Dropped when the app answers it after all: the app writes its own.
 */
function arrival(settings: RequestLogSettings, unlogged: boolean, req: Request): Arrival {
  const requestId = requestIdOf(req);
  const path = getPath(req);
  return { requestId, log: writesRequestLine(path) && !unlogged ? sampleRequest(settings, requestId, req.method, path, performance.now()) : null };
}

/**
 * An OPTIONS the app answers before its logger, with no line: with a CORS list, Hono's cors answers
 * every one (mountPreflight), granted or not. Without a list it reaches the /v1 logger, and its 401.
 */
function answeredBeforeTheLogger(config: ResolvedConfig, req: Request): boolean {
  return req.method === "OPTIONS" && config.cors.allowedOrigins.length > 0;
}

/** A CORS preflight: what a browser sends, with no key, before a request a page may not send unasked. */
function isPreflight(req: Request): boolean {
  return req.method === "OPTIONS" && req.headers.has("origin") && req.headers.has("access-control-request-method");
}

/** The app's answer to a preflight when it grants it (a page allowed to read the answer); null when it does not. */
async function grantedPreflight(config: ResolvedConfig, req: Request, env: Env, ctx: ExecutionContext): Promise<Response | null> {
  if (preflights?.config !== config) {
    const app = new Hono<AppEnv>();
    mountPreflight(app, config.cors.allowedOrigins);
    preflights = { config, app };
  }
  const res = await preflights.app.fetch(req, env, ctx);
  return res.headers.has("access-control-allow-origin") ? res : null;
}

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

/**
 * No app to answer yet: this answer says what the app's would (its request id, CORS for the
 * config's pages and the keys'), and leaves the request line the app's would: no caller was
 * authenticated.
 */
async function beforeTheApp(error: GatewayError, req: Request, config: ResolvedConfig, env: Env, ctx: ExecutionContext, came: Arrival): Promise<Response> {
  const res = errorAnswer(error, came.requestId);
  await corsBeforeTheApp(res.headers, config.cors.allowedOrigins, req.headers.get("origin") ?? undefined, env);
  return answered(res, req, came, ctx);
}

/**
 * An answer given before the app, its line noted; sent once the body it did not read has come, as
 * the app's are (discardUnread): a client still uploading it would meet a broken pipe, not this answer.
 */
async function answered(res: Response, req: Request, came: Arrival, ctx: ExecutionContext): Promise<Response> {
  if (came.log) noteAnswer(came.log, res, null, ctx);
  await discardUnread(req);
  return res;
}

function serve(config: ResolvedConfig, fleet: FleetView, req: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
  if (!built || built.config !== config || built.fleet !== fleet) {
    if (built?.fleet !== fleet) fleetRead(fleet.groups);
    built = { config, fleet, app: buildApp(withFleet(config, fleet)) };
  }
  return built.app.fetch(req, env, ctx);
}
