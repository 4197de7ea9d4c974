import type { Context, MiddlewareHandler } from "hono";
import { Hono } from "hono/tiny";
import { forbidden, methodNotAllowed, notFound } from "../../src/openai/errors.ts";
import { modelObject } from "../../src/openai/models.ts";
import type { LoadedConfig } from "../config.ts";
import { mountAdmin } from "../admin/routes.ts";
import type { AppEnv } from "./app-env.ts";
import { admitCaller, configCors, keyCors, mountPreflight, refusal } from "./admit.ts";
import { allowsModel, countsSpendIn } from "../../src/tenants/route-tenant.ts";
import { mountEndpoints } from "./endpoints.ts";
import { discardUnread } from "./body.ts";
import { errorAnswer } from "./error-answer.ts";
import { requestIdOf } from "./request-id.ts";
import { requestLogger } from "./request-logger.ts";
import { mountMetrics } from "./metrics.ts";
import { askEveryObject, fleetReadDeadline, groupIds } from "./group-object.ts";
import { recentFleet } from "../fleet.ts";
import type { GroupStatus } from "../../src/routing/protocol.ts";
import { mergeStatus } from "../../src/sharding/merge.ts";
import { proxyCompletion } from "./proxy.ts";
import { openRealtime } from "./realtime.ts";
import type { Endpoint } from "./validate.ts";


const stampRequestId: MiddlewareHandler<AppEnv> = async (c, next) => {
  await next();
  c.res.headers.set("x-request-id", c.get("requestId"));
};

/** The gateway's HTTP surface for one config; built once per isolate. */
export function buildApp(config: LoadedConfig): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const origins = config.cors.allowedOrigins;

  app.use("*", async (c, next) => {
    c.set("startedAt", performance.now());
    c.set("requestId", requestIdOf(c.req.raw));
    await next();
    if (c.req.raw.body !== null && !c.req.raw.bodyUsed) await discardUnread(c.req.raw);
  });
  mountPreflight(app, origins);
  if (origins.length > 0) app.use("*", configCors(origins));
  // What the gateway answers itself carries the request's id as a proxied answer and an error do:
  // a client matches it to the request's log line. Not around the proxied paths, whose answers set
  // it with their routing headers and pay nothing more.
  for (const path of ["/health", "/metrics", "/admin/*", "/v1/models", "/v1/models/*", "/v1/kvgate/status"]) app.use(path, stampRequestId);

  app.get("/health", (c) => c.json({ status: "ok" }));
  mountAdmin(app, config);
  mountMetrics(app, config);

  app.use("/v1/*", requestLogger(config.logging.requests));
  app.use("/v1/*", async (c, next) => {
    try {
      await admitCaller(c, config);
    } catch (e) {
      return refusal(c, e);
    }
    await next();
    keyCors(c);
  });

  app.get("/v1/models", async (c) => {
    const caller = c.get("caller");
    const data = [];
    for (const g of (await recentFleet(c.env, c.executionCtx, config.groups)).groups) {
      // The models the key can use: not those of a group it would be refused for its pricing (proxy.ts tenantFor).
      if (caller.kind === "key" && !countsSpendIn(caller.key.record, g)) continue;
      for (const id of [g.name, ...g.aliases]) if (caller.kind === "master" || allowsModel(caller.key.record, id, g.name)) data.push(modelObject(id, g.name));
    }
    return c.json({ object: "list", data });
  });

  const completion = (endpoint: Endpoint) => (c: Context<AppEnv>) =>
    proxyCompletion({ endpoint, req: c.req.raw, env: c.env, ctx: c.executionCtx, config, requestId: c.get("requestId"), startedAt: c.get("startedAt"), caller: c.get("caller"), log: c.get("log") });
  app.post("/v1/chat/completions", completion("chat"));
  app.post("/v1/completions", completion("completions"));
  app.all("/v1/realtime", (c) => openRealtime({ req: c.req.raw, env: c.env, ctx: c.executionCtx, config, requestId: c.get("requestId"), startedAt: c.get("startedAt"), caller: c.get("caller"), log: c.get("log") }));
  mountEndpoints(app, config, completion);

  app.get("/v1/kvgate/status", async (c) => {
    if (c.get("caller").kind !== "master") throw forbidden("the gateway's status is for its operator: use the master key or the admin API", "insufficient_permissions");
    const until = fleetReadDeadline();
    const fleet = await recentFleet(c.env, c.executionCtx, config.groups);
    const groups: GroupStatus[] = [];
    const unavailable: string[] = [];
    const inFlightUnknown: string[] = [];
    for (const a of await askEveryObject(c.env, fleet, (o, g) => o.status(groupIds(g)), until)) {
      // A sharded group is shown only whole: its shards' parts would read as the group.
      if (a.complete) groups.push(mergeStatus(a.answers));
      else unavailable.push(a.group);
      if (a.complete && a.unanswered.length > 0) inFlightUnknown.push(a.group);
    }
    return c.json({ groups, unavailable, inFlightUnknown });
  });

  // Another method on these paths is a 405 naming the ones they take (a HEAD is answered by the
  // GET route: Hono runs it as a GET and drops the body). The /v1 key check comes first, as for
  // any /v1 call; a preflight that the config's or a key's origins grant is answered before it.
  const allowed: [string, string][] = [
    ["/v1/chat/completions", "POST"],
    ["/v1/completions", "POST"],
    ["/v1/models", "GET, HEAD"],
    ["/v1/models/:id{.+}", "GET, HEAD"],
    ["/v1/kvgate/status", "GET, HEAD"],
    ["/health", "GET, HEAD"],
  ];
  for (const [path, allow] of allowed) {
    app.all(path, (c) => {
      throw methodNotAllowed(c.req.path, allow);
    });
  }
  app.notFound((c) => errorAnswer(notFound(`no route for ${c.req.method} ${new URL(c.req.url).pathname}`, "unknown_url"), c.get("requestId")));
  app.onError((err, c) => errorAnswer(err, c.get("requestId")));
  return app;
}
