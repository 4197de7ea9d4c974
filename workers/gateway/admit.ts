import type { Context, MiddlewareHandler } from "hono";
import { forbidden } from "../../src/openai/errors.ts";
import type { LoadedConfig } from "../config.ts";
import type { AppEnv } from "./app-env.ts";
import { authenticate, type Caller } from "./auth.ts";
import { keyOrigins } from "./key-cache.ts";

/** The routing headers a browser page may read (CORS), for the config's origins and the keys' alike. */
export const EXPOSED = ["x-kvgate-backend", "x-kvgate-reason", "x-kvgate-attempts", "x-kvgate-group", "x-kvgate-prefix-blocks", "x-kvgate-overhead-ms", "x-request-id", "retry-after"];

/**
 * The key check of a client request: who calls (set as the request's `caller`), or a 401. A
 * virtual key limited to browser origins is refused from any other origin, and from a caller that
 * names none: such a key is a browser app's.
 */
export async function admitCaller(c: Context<AppEnv>, config: LoadedConfig): Promise<Caller> {
  const caller = await authenticate(c.req.raw, config, c.env, c.executionCtx);
  if (caller.kind === "key") {
    const allowed = caller.key.record.origins;
    const origin = c.req.header("origin");
    if (allowed.length > 0 && (origin === undefined || !allowed.includes(origin))) {
      throw forbidden(origin === undefined ? `API key ${caller.key.record.prefix}… is for browser pages only (${allowed.join(", ")}); this request names no Origin` : `API key ${caller.key.record.prefix}… may not be used from origin ${origin}`, "origin_not_allowed");
    }
  }
  c.set("caller", caller);
  return caller;
}

/** A virtual key's own browser origins: its answers (errors too) readable by its page, whatever the config's CORS list says. */
export function keyCors(c: Context<AppEnv>): void {
  const caller = c.get("caller");
  if (caller?.kind !== "key" || caller.key.record.origins.length === 0) return;
  const origin = c.req.header("origin");
  if (origin === undefined || !caller.key.record.origins.includes(origin)) return;
  c.res.headers.set("access-control-allow-origin", origin);
  c.res.headers.append("vary", "Origin");
  c.res.headers.set("access-control-expose-headers", EXPOSED.join(","));
}

/**
 * A preflight (which carries no key) from an origin the config does not list but some virtual key
 * allows: granted, so the page may send its request, which its key then decides.
 */
export function keyPreflight(configOrigins: readonly string[]): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    if (c.req.method !== "OPTIONS") return next();
    const origin = c.req.header("origin");
    const method = c.req.header("access-control-request-method");
    if (!origin || !method || configOrigins.includes("*") || configOrigins.includes(origin)) return next();
    if (!(await keyOrigins(c.env)).has(origin)) return next();
    const headers: Record<string, string> = {
      "access-control-allow-origin": origin,
      "access-control-allow-methods": "GET,POST,OPTIONS",
      "access-control-max-age": "600",
      vary: "Origin, Access-Control-Request-Headers",
    };
    const asked = c.req.header("access-control-request-headers");
    if (asked) headers["access-control-allow-headers"] = asked;
    return new Response(null, { status: 204, headers });
  };
}
