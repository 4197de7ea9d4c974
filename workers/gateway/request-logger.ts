import type { MiddlewareHandler } from "hono";
import { sampleRequest, type RequestLog, type RequestLogSettings } from "../../src/logging/request-log.ts";
import { errorCodeOf } from "../../src/openai/errors.ts";
import type { WaitUntil } from "../env.ts";
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
    const caller = c.get("caller");
    noteAnswer(log, c.res, caller === undefined ? null : caller.kind === "master" ? "master" : caller.key.record.id, c.executionCtx);
  };
}

/**
 * `res` is the request's answer, going out now: noted on its line once the response has gone to
 * the runtime (a timer under waitUntil), when noting it writes the line. Also for the answers the
 * gateway gives before its app (workers/gateway/index.ts), which no caller was authenticated for.
 * A line that waits for its relayed body's end (a stream) is written then: the answer is noted at
 * once, a few fields, sparing every such request a timer of the runtime's (~10 µs).
 */
export function noteAnswer(log: RequestLog, res: Response, keyId: string | null, ctx: WaitUntil): void {
  const at = performance.now();
  if (log.waitsForBody) return log.answered(at, res.status, keyId, errorCodeOf(res));
  ctx.waitUntil(
    new Promise<void>((done) =>
      setTimeout(() => {
        log.answered(at, res.status, keyId, errorCodeOf(res));
        done();
      }, 0),
    ),
  );
}
