import type { Context, Hono, MiddlewareHandler } from "hono";
import { cors } from "hono/cors";
import { forbidden, GatewayError, SHOULD_RETRY } from "../../src/openai/errors.ts";
import type { KeyRecord } from "../../src/tenants/protocol.ts";
import type { LoadedConfig } from "../config.ts";
import type { Env } from "../env.ts";
import type { AppEnv } from "./app-env.ts";
import { authenticate, originsOfRefusedKey, type Caller } from "./auth.ts";
import { errorAnswer } from "./error-answer.ts";
import { keyOrigins, lastKeyOrigins } from "./key-cache.ts";

/** The routing headers a browser page may read (CORS), for the config's origins and the keys' alike. */
export const EXPOSED = ["x-kvgate-backend", "x-kvgate-reason", "x-kvgate-attempts", "x-kvgate-group", "x-kvgate-prefix-blocks", "x-kvgate-overhead-ms", "x-request-id", "retry-after", SHOULD_RETRY];

/**
 * The key check of a client request: who calls (set as the request's `caller`), or a 401. A
 * virtual key limited to browser origins is refused from any other origin, and from a caller that
 * names none: such a key is a browser app's.
 */
export async function admitCaller(c: Context<AppEnv>, config: LoadedConfig): Promise<Caller> {
  const caller = await authenticate(c.req.raw, config, c.env, c.executionCtx);
  // Set before the origin check: a key refused for where it is used did authenticate, and its
  // request line names it (a browser key used from a foreign page is one an operator looks into).
  c.set("caller", caller);
  if (caller.kind === "key") {
    const refused = originRefusal(caller.key.record, c.req.raw);
    if (refused) throw refused;
  }
  return caller;
}

/**
 * The 403 a request gets with a key (`r`) limited to browser origins from any other origin, or
 * naming none; null when the key may be used from where `req` comes. Asked again of an open
 * realtime session with the key as it now stands (workers/gateway/realtime.ts).
 */
export function originRefusal(r: KeyRecord, req: Request): GatewayError | null {
  const allowed = r.origins;
  if (allowed.length === 0) return null;
  const origin = req.headers.get("origin") ?? ownOrigin(req);
  if (origin !== undefined && allowed.includes(origin)) return null;
  return forbidden(origin === undefined ? `API key ${r.prefix}… is for browser pages only (${allowed.join(", ")}); this request names no Origin` : `API key ${r.prefix}… may not be used from origin ${origin}`, "origin_not_allowed");
}

/**
 * A browser names no Origin on a GET to the page's own origin (the Fetch standard sends it with
 * cross-origin requests and other methods only), but says where the request comes from in
 * Sec-Fetch-Site: a request from one of the gateway's own pages (the playground) comes from its
 * origin. A non-browser caller can say either header; a key's origins keep honest pages apart,
 * they authenticate nothing.
 */
function ownOrigin(req: Request): string | undefined {
  return req.headers.get("sec-fetch-site") === "same-origin" ? new URL(req.url).origin : undefined;
}

/** A virtual key's own browser origins: its answers (errors too) readable by its page, whatever the config's CORS list says. */
export function keyCors(c: Context<AppEnv>): void {
  const caller = c.get("caller");
  if (caller?.kind !== "key" || caller.key.record.origins.length === 0) return;
  const origin = c.req.header("origin");
  if (origin === undefined || !caller.key.record.origins.includes(origin)) return;
  allowOrigin(c.res.headers, origin);
}

/**
 * The answer to a caller the key check refused (`err`), readable by a page a key is for: the
 * refused key's own page (revoked, expired), or any page some key is for, as its preflight was
 * granted (a key rotated away or never issued, the key store unavailable). Without it a browser
 * shows the page a network failure, not the gateway's 401 (or 503 and its Retry-After).
 */
export async function refusal(c: Context<AppEnv>, err: unknown): Promise<Response> {
  const res = errorAnswer(err, c.get("requestId"));
  const origin = c.req.header("origin");
  if (origin === undefined) return res;
  if (originsOfRefusedKey(err).includes(origin)) allowOrigin(res.headers, origin);
  // The key store down answers no question about origins either: not asked twice, the origins last read answer.
  else await forKeyPages(res.headers, origin, c.env, err instanceof GatewayError && err.code === "key_store_unavailable");
  return res;
}

/**
 * CORS on an answer given before the app (workers/gateway/index.ts: the fleet cannot be read, or
 * the deploy lacks a secret): the config's list, and any page some key is for, as `refusal`
 * answers a caller it could not admit. The page's preflight was granted (`mountPreflight`), so
 * it reads the error (a 503 to retry, the secret to set) rather than a network failure.
 */
export async function corsBeforeTheApp(headers: Headers, configOrigins: readonly string[], origin: string | undefined, env: Env): Promise<void> {
  withConfigCors(headers, configOrigins, origin);
  if (origin !== undefined && !headers.has("access-control-allow-origin")) await forKeyPages(headers, origin, env);
}

/**
 * An answer readable by the page on `origin` when some key is for it: its preflight was
 * granted. `lastRead`: the origins as last read, asking no one (the key store is down).
 */
async function forKeyPages(headers: Headers, origin: string, env: Env, lastRead = false): Promise<void> {
  if ((lastRead ? lastKeyOrigins() : await keyOrigins(env)).has(origin)) allowOrigin(headers, origin);
}

/**
 * The config's CORS list (cors.allowedOrigins) on every answer but a preflight's, set on the answer
 * once it is made. Hono's cors middleware sets its headers on a stand-in answer before the handler
 * runs, and Hono then copies the handler's answer into a new one to merge them: a second Response
 * per request, and the answer the gateway made (which its log line reads its error code from) is
 * not the one that goes.
 */
export function configCors(origins: readonly string[]): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    await next();
    if (c.req.method === "OPTIONS") return;
    withConfigCors(c.res.headers, origins, c.req.header("origin"));
  };
}

/** The config's CORS list on one answer's headers, for a request from `origin`. */
export function withConfigCors(headers: Headers, origins: readonly string[], origin: string | undefined): void {
  if (origins.length === 0) return;
  if (origins.includes("*")) return allowOrigin(headers, "*");
  if (origin !== undefined && origins.includes(origin)) allowOrigin(headers, origin);
  else varyOrigin(headers);
}

/** An answer a page on `origin` may read, its routing headers too. */
function allowOrigin(headers: Headers, origin: string): void {
  headers.set("access-control-allow-origin", origin);
  if (origin !== "*") varyOrigin(headers);
  headers.set("access-control-expose-headers", EXPOSED.join(","));
}

/** A cache must keep the answer apart per Origin: said once, whichever CORS rule said it first. */
function varyOrigin(headers: Headers): void {
  if (!/(^|,)\s*origin\s*(,|$)/i.test(headers.get("vary") ?? "")) headers.append("vary", "Origin");
}

/**
 * The answers to a CORS preflight, which carries no key: granted to a page some virtual key is for
 * (keyPreflight), and to the config's origins (cors.allowedOrigins). Mounted on the app, and on
 * the gateway's preflight answers given before the app exists (workers/gateway/index.ts): a
 * preflight needs no fleet. Only preflights pay for it: the router skips it for every other method.
 */
export function mountPreflight(app: Hono<AppEnv>, origins: readonly string[]): void {
  app.options("*", keyPreflight(origins));
  if (origins.length > 0) app.options("*", cors({ origin: origins.includes("*") ? "*" : [...origins], exposeHeaders: EXPOSED, maxAge: 600 }));
}

/**
 * A preflight (which carries no key) from an origin the config does not list but some virtual key
 * is for, live or not: granted, so the page may send its request, which its key then decides.
 */
function keyPreflight(configOrigins: readonly string[]): MiddlewareHandler<AppEnv> {
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
