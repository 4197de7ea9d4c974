import type { Context, Hono } from "hono";
import { badRequest, GatewayError, unavailable } from "../../src/openai/errors.ts";
import { KEY_PAGE_LIMIT, keyList, keyView, USAGE_PAGE, usageCursorOf, usageView, type IssuedKeyView } from "../../src/tenants/admin-api.ts";
import { dayParam } from "../../src/tenants/instant.ts";
import { KEY_STATUSES, type KeyStatus } from "../../src/tenants/key-record.ts";
import type { IssuedKey, KeyPage, TenantsResult, UsageQuery } from "../../src/tenants/protocol.ts";
import { TENANTS_NAME } from "../../src/tenants/tenants-name.ts";
import type { Env } from "../env.ts";
import { mayRetry, recentModels } from "../fleet.ts";
import type { LoadedConfig } from "../config.ts";
import type { AppEnv } from "../gateway/app-env.ts";
import { readJsonBody, readOptionalJsonBody } from "../gateway/body.ts";
import { queryParams } from "./params.ts";

/** A key's settings are a few hundred bytes; this bounds what an admin call may make the Worker read. */
const BODY_LIMIT = 64 * 1024;
const USAGE_PARAMS = ["key", "since", "until", "model", "limit", "after"] as const;
const LIST_PARAMS = ["limit", "after", "status"] as const;

type Tenants = ReturnType<Env["TENANTS"]["getByName"]>;

/** A call that reads, or one that may change a key (which a failed call may or may not have done). */
type CallKind = "read" | "change";

/**
 * One call to the tenants object: its answer, or its refusal as an OpenAI-style error. A call the
 * runtime says may be retried (overloaded, reset by a deploy) is a 503 with Retry-After, as the
 * fleet routes answer for the registry (registryFailure), a change's saying it may have been made;
 * any other failure — a bug, a write its storage refused — is thrown as it is, a 500 no retry mends.
 */
async function ask<T>(env: Env, kind: CallKind, call: (tenants: Tenants) => Promise<TenantsResult<T>>): Promise<T> {
  let r: TenantsResult<T>;
  try {
    r = await call(env.TENANTS.getByName(TENANTS_NAME));
  } catch (e) {
    if (!mayRetry(e)) throw e;
    console.error(`kvgate: calling the tenants object failed: ${(e as Error).message}`);
    throw unavailable(
      kind === "read" ? "the key store is unavailable; try again shortly" : "the key store did not answer: the change may or may not have been made; read the key back (GET /admin/v1/keys) before sending it again",
      "key_store_unavailable",
    );
  }
  return answer(r);
}

/**
 * Virtual keys and their usage under /admin/v1 (the admin key middleware of routes.ts covers
 * them): the tenants object checks and stores; this turns its answers into JSON views and its
 * refusals into OpenAI-style errors.
 */
export function mountKeys(app: Hono<AppEnv>, config: LoadedConfig): void {
  const K = "/admin/v1/keys";
  // No body at all is a key with no limits; a body must be a JSON object.
  app.post(K, async (c) => {
    // Only no body is none: a JSON null is a body, and not an object.
    const sent = await readOptionalJsonBody(c.req.raw, BODY_LIMIT);
    const settings = sent === undefined ? {} : sent;
    return issued(c, await ask(c.env, "change", (t) => t.create(settings)), 201);
  });
  app.get(K, async (c) => {
    const query = keyPage(c.req.url);
    const page = await ask(c.env, "read", (t) => t.list(query));
    const now = Date.now();
    return c.json(keyList(page.keys.map((l) => keyView(l, now)), page.hasMore));
  });
  app.get(`${K}/:id`, async (c) => c.json(keyView(await ask(c.env, "read", (t) => t.get(c.req.param("id"))), Date.now())));
  app.patch(`${K}/:id`, async (c) => {
    const patch = await body(c);
    return c.json(keyView(await ask(c.env, "change", (t) => t.update(c.req.param("id"), patch)), Date.now()));
  });
  app.post(`${K}/:id/revoke`, async (c) => c.json(keyView(await ask(c.env, "change", (t) => t.revoke(c.req.param("id"))), Date.now())));
  app.post(`${K}/:id/rotate`, async (c) => issued(c, await ask(c.env, "change", (t) => t.rotate(c.req.param("id")))));
  app.get("/admin/v1/usage", async (c) => {
    const query = usageQuery(c.req.url);
    // Usage is kept under the group's name, the routing object's: an alias the key's clients call
    // reads its group's rows, not none. A name no group has now (a group removed) is read as given.
    if (query.model !== null) query.model = (await recentModels(c.env, c.executionCtx, config.byModel)).get(query.model)?.name ?? query.model;
    return c.json(usageView(await ask(c.env, "read", (t) => t.usage(query))));
  });
}

function body(c: Context<AppEnv>): Promise<unknown> {
  return readJsonBody(c.req.raw, BODY_LIMIT);
}

function answer<T>(r: TenantsResult<T>): T {
  if (r.ok) return r.value;
  throw new GatewayError(r.status, r.status === 404 ? "not_found_error" : "invalid_request_error", r.message, r.code, r.param);
}

function issued(c: Context<AppEnv>, { key, lookup }: IssuedKey, status: 200 | 201 = 200): Response {
  const view: IssuedKeyView = { ...keyView(lookup, Date.now()), key };
  return c.json(view, status);
}

/** `?limit=N&after=ID&status=S`: N keys (1 to KEY_PAGE_LIMIT, that many unless said) after the key ID, oldest first, of status S or any. */
function keyPage(url: string): KeyPage {
  const params = queryParams(url, LIST_PARAMS, "the key list");
  return { limit: pageLimit(params, KEY_PAGE_LIMIT, KEY_PAGE_LIMIT), after: params.get("after") || null, status: keyStatusParam(params) };
}

function keyStatusParam(params: URLSearchParams): KeyStatus | null {
  const text = params.get("status");
  if (text === null || text === "") return null;
  if (!(KEY_STATUSES as readonly string[]).includes(text)) throw badRequest(`status must be one of ${KEY_STATUSES.join(", ")}, not "${text}"`, "status", "invalid_value");
  return text as KeyStatus;
}

/** `limit`: an integer from 1 to `max`; `fallback` when it is not given. */
function pageLimit(params: URLSearchParams, fallback: number, max: number): number {
  const text = params.get("limit");
  const limit = text === null || text === "" ? fallback : /^\d{1,9}$/.test(text) ? Number(text) : NaN;
  if (!(limit >= 1 && limit <= max)) throw badRequest(`limit must be an integer from 1 to ${max}, not "${text}"`, "limit", "invalid_value");
  return limit;
}

/** `?key=ID&since=T&until=T&model=M&limit=N&after=C`; since and until are days or ISO timestamps (a timestamp counts its whole UTC day). */
function usageQuery(url: string): UsageQuery {
  const params = queryParams(url, USAGE_PARAMS, "usage");
  const key = params.get("key");
  if (!key) throw badRequest("key is required: the id of the key whose usage to read (?key=key_…)", "key", "invalid_value");
  const afterText = params.get("after") || null;
  const after = afterText === null ? null : usageCursorOf(afterText);
  if (afterText !== null && after === null) throw badRequest("after must be the next_after of a page of usage, as it came", "after", "invalid_value");
  return { key, since: day(params, "since"), until: day(params, "until"), model: params.get("model") || null, limit: pageLimit(params, USAGE_PAGE.limit, USAGE_PAGE.max), after };
}

function day(params: URLSearchParams, name: "since" | "until"): string | null {
  const text = params.get(name);
  if (text === null || text === "") return null;
  const d = dayParam(text);
  if (d === null) throw badRequest(`${name} must be a day (YYYY-MM-DD) or an ISO 8601 timestamp with its zone, not "${text}"`, name, "invalid_value");
  return d;
}
