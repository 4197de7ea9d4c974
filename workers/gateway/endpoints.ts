import type { Context, Hono } from "hono";
import { methodNotAllowed } from "../../src/openai/errors.ts";
import { modelObject } from "../../src/openai/models.ts";
import type { LoadedConfig } from "../config.ts";
import type { AppEnv } from "./app-env.ts";
import { admitCaller, keyCors, refusal } from "./admit.ts";
import { errorAnswer } from "./error-answer.ts";
import { requestLogger } from "./request-logger.ts";
import { groupForCaller, tenantFor } from "./proxy.ts";
import { recentModels } from "../fleet.ts";
import type { Endpoint } from "./validate.ts";

/** The endpoints vLLM and SGLang serve beside chat and completions, by the path a client calls. */
const PASSED_THROUGH: Readonly<Record<string, Endpoint>> = {
  "v1/embeddings": "embeddings",
  "v1/responses": "responses",
  "v1/rerank": "rerank",
  "v1/score": "score",
  // vLLM's own paths, outside /v1.
  rerank: "rerank",
  "v2/rerank": "rerank",
  score: "score",
};

/**
 * One route for all of them. The app's router tests every route's pattern on every request, so
 * this costs a chat request one pattern that fails on its first characters, not one per path.
 */
const PATTERN = `/:endpoint{${Object.keys(PASSED_THROUGH).join("|")}}`;

/**
 * The paths whose requests leave a request line (README → Logs): /v1's (the app's /v1 logger) and
 * these endpoints' outside it (`logged`, below), as the app's routes match them.
 */
const LINED_PATH = new RegExp(`^/(?:v1(?:$|/)|(?:${Object.keys(PASSED_THROUGH).join("|")})/?$)`);

/** Whether a request to `path` leaves a request line: for the answers the gateway gives before its app (workers/gateway/index.ts). */
export function writesRequestLine(path: string): boolean {
  return LINED_PATH.test(path);
}

/**
 * Mounts those endpoints and GET /v1/models/{id}; mount it after the /v1 key check. Each POST
 * takes chat's path through the gateway (`proxy`, the app's handler): its body validated once,
 * one route call to the group's Durable Object, the lease held until the answer ends, the
 * upstream's answer passed on as it comes.
 */
export function mountEndpoints(app: Hono<AppEnv>, config: LoadedConfig, proxy: (endpoint: Endpoint) => (c: Context<AppEnv>) => Promise<Response>): void {
  const logged = requestLogger(config.logging.requests);
  const handlers = new Map<string, (c: Context<AppEnv>) => Promise<Response>>();
  for (const [path, endpoint] of Object.entries(PASSED_THROUGH)) handlers.set(path, proxy(endpoint));
  app.all(PATTERN, async (c) => {
    const path = c.req.param("endpoint") ?? "";
    const handler = handlers.get(path);
    if (path.startsWith("v1/")) {
      if (c.req.method !== "POST" || !handler) throw methodNotAllowed(`/${path}`, "POST");
      return handler(c);
    }
    // Outside /v1 this route does what the /v1 middleware does: the request's log line, the same
    // key check (no path is a way around it), and a key's CORS headers on its answer, errors included.
    await logged(c, async () => {
      try {
        await admitCaller(c, config);
      } catch (e) {
        c.res = await refusal(c, e);
        return;
      }
      try {
        if (c.req.method !== "POST" || !handler) throw methodNotAllowed(`/${path}`, "POST");
        c.res = await handler(c);
      } catch (e) {
        c.res = errorAnswer(e, c.get("requestId"));
      }
      keyCors(c);
    });
    return c.res;
  });
  // Model ids may hold slashes (meta-llama/Llama-3.1-8B), sent as they are or as %2F.
  app.get("/v1/models/:id{.+}", async (c) => {
    const id = c.req.param("id");
    // Looked up in the fleet as the model list reads it (afresh at most once a second), so that the
    // two agree on a model removed or moved since this isolate's snapshot; one added since is
    // looked up afresh too, as a request's model is.
    const caller = c.get("caller");
    const { group } = await groupForCaller(c.env, caller, id, await recentModels(c.env, c.executionCtx, config.byModel));
    // Answered as a call to it would be: a key whose only budget is in dollars gets the 403 of a
    // group without pricing (model_not_priced), which says why the list leaves it out.
    tenantFor(caller, id, group);
    return c.json(modelObject(id, group.name));
  });
}
