import type { MiddlewareHandler } from "hono";
import { sampleRequest, type RequestLogSettings } from "../../src/logging/request-log.ts";
import { errorCodeOf } from "../../src/openai/errors.ts";
import type { AppEnv } from "./app-env.ts";

/**
 * The client API's request lines (src/logging/request-log.ts). The request is sampled as it comes
 * in; its answer is noted after the response has gone to the runtime (a timer under waitUntil), so
 * the line costs the response nothing; a relayed body's end completes it.
 */
export function requestLogger(settings: RequestLogSettings): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const log = sampleRequest(settings, c.get("requestId"), c.req.method, c.req.path, c.get("startedAt"));
    c.set("log", log);
    await next();
    if (!log) return;
    const res = c.res;
    const at = performance.now();
    const caller = c.get("caller");
    const keyId = caller === undefined ? null : caller.kind === "master" ? "master" : caller.key.record.id;
    c.executionCtx.waitUntil(
      new Promise<void>((done) =>
        setTimeout(() => {
          log.answered(at, res.status, keyId, errorCodeOf(res));
          done();
        }, 0),
      ),
    );
  };
}
