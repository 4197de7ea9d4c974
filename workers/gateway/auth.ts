import { unauthorized } from "../../src/openai/errors.ts";
import { subprotocolAuthorization } from "../../src/realtime/handshake.ts";
import { keyHashOf, looksLikeVirtualKey } from "../../src/tenants/key-format.ts";
import type { KeyLookup } from "../../src/tenants/protocol.ts";
import type { LoadedConfig } from "../config.ts";
import type { Env, WaitUntil } from "../env.ts";
import { lookupKey } from "./key-cache.ts";

const encoder = new TextEncoder();
/** Per secret value, its digest: computed once per isolate. */
const digests = new Map<string, Promise<Uint8Array>>();

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

function digestOf(key: string): Promise<Uint8Array> {
  let d = digests.get(key);
  if (!d) {
    // A rotated secret leaves its old digest behind: a handful at most, over an isolate's life.
    if (digests.size > 16) digests.clear();
    digests.set(key, (d = sha256(key)));
  }
  return d;
}

/** Compares digests so neither the key's length nor its bytes shape the time taken. */
function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  let diff = a.length ^ b.length;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] ?? 0);
  return diff === 0;
}

/** The key of `Authorization: Bearer <key>` (or a browser's realtime subprotocol), or a 401 saying what is wrong with it. */
function bearer(req: Request): string {
  const header = req.headers.get("authorization") ?? subprotocolAuthorization(req.headers);
  if (!header) throw unauthorized("missing API key: send Authorization: Bearer <key>");
  const m = /^Bearer\s+(.+)$/i.exec(header);
  if (!m) throw unauthorized("malformed Authorization header: expected Bearer <key>");
  return (m[1] as string).trim();
}

/** The auth settings that name a key's secret. */
type KeyField = "masterKeyEnv" | "adminKeyEnv" | "registerKeyEnv" | "metricsKeyEnv";

/**
 * Throws a 401 unless the request's bearer key is the value of one of the secrets the `accepted`
 * settings name. Every accepted secret is compared, in constant time, whichever matches: the time
 * taken says nothing of which key was tried.
 */
async function requireKey(req: Request, config: LoadedConfig, env: Env, accepted: readonly KeyField[], what: string): Promise<void> {
  const given = bearer(req);
  if (!(await matches(given, config, env, accepted, what))) throw unauthorized("invalid API key");
}

/** Settings whose missing secret this isolate has logged: once each, not per request (anyone may send those). */
const loggedUnset = new Set<string>();

/**
 * A secret that is not set accepts nothing. When none is, the 401 (which anyone may get) and the
 * log line name the settings, never the names they hold: an operator who pasted a key where its
 * secret's name goes (it is shaped like one) would have it sent to every caller.
 */
async function matches(given: string, config: LoadedConfig, env: Env, accepted: readonly KeyField[], what: string): Promise<boolean> {
  const keys = accepted.map((field) => secretOf(env, config.auth[field])).filter((k) => k !== undefined);
  if (keys.length === 0) {
    const settings = accepted.map((field) => `auth.${field}`).join(" or ");
    if (!loggedUnset.has(settings)) {
      loggedUnset.add(settings);
      console.error(`kvgate: the Worker has no secret by the name ${settings} gives: every request for the ${what} gets a 401 (npx wrangler secret put <that name>)`);
    }
    throw unauthorized(`the gateway has no ${what} configured (see ${settings})`);
  }
  const [g, ...expected] = await Promise.all([sha256(given), ...keys.map(digestOf)]);
  let ok = false;
  for (const e of expected) ok = constantTimeEqual(e, g as Uint8Array) || ok;
  return ok;
}

/** The browser origins of a key refused for what it is (revoked, expired): its page may read why. */
const refusedKeyOrigins = new WeakMap<Error, readonly string[]>();

function refusedKey(message: string, origins: readonly string[]): Error {
  const err = unauthorized(message);
  refusedKeyOrigins.set(err, origins);
  return err;
}

/** The origins a refused key was for; none for any other error. */
export function originsOfRefusedKey(err: unknown): readonly string[] {
  return err instanceof Error ? (refusedKeyOrigins.get(err) ?? []) : [];
}

/** Who is calling: the operator's master key, or a virtual key (by its SHA-256, `hash`) and what it may do. */
export type Caller = { kind: "master" } | { kind: "key"; key: KeyLookup; hash: string };

const MASTER: Caller = { kind: "master" };

/**
 * The caller of a /v1 request, or a 401: the master key, or a virtual key that is neither revoked
 * nor expired. Nothing else about a request lets it in: its Host and Origin headers are the
 * client's (or a proxy's) to write. A virtual key is looked up by its SHA-256 in the isolate's
 * cache of the tenants object (workers/gateway/key-cache.ts); anything not shaped like one is
 * refused without asking.
 */
export async function authenticate(req: Request, config: LoadedConfig, env: Env, ctx: WaitUntil): Promise<Caller> {
  const given = bearer(req);
  if (!looksLikeVirtualKey(given)) {
    if (await matches(given, config, env, ["masterKeyEnv"], "master key")) return MASTER;
    throw unauthorized("invalid API key");
  }
  // A master key may be shaped like a virtual key too (an operator who copied the style of the
  // keys `keys create` prints): whenever one is set, it is compared first, in constant time, with
  // the one SHA-256 the lookup takes, so it is never taken for a virtual key (never found, or
  // that key's limits) nor refused while the tenants object is down.
  const digest = await sha256(given);
  const master = secretOf(env, config.auth.masterKeyEnv);
  if (master !== undefined && constantTimeEqual(await digestOf(master), digest)) return MASTER;
  const hash = keyHashOf(digest);
  return { kind: "key", key: usableKey(await lookupKey(env, ctx, hash)), hash };
}

/** The key found, or the 401 it gets: one that does not exist (never issued, rotated away), revoked or expired. */
function usableKey(found: KeyLookup | null): KeyLookup {
  if (!found) throw unauthorized("invalid API key");
  const r = found.record;
  if (r.revokedAt !== null) throw refusedKey(`API key ${r.prefix}… was revoked`, r.origins);
  if (r.expiresAt !== null && r.expiresAt <= Date.now()) throw refusedKey(`API key ${r.prefix}… expired at ${new Date(r.expiresAt).toISOString()}`, r.origins);
  return found;
}

/**
 * The key check again, for a caller admitted a while ago (a realtime session, open for hours):
 * the key as it stands now, or the 401 a request with its key would get now, read from the isolate's key cache as a
 * request's is, so a revocation, rotation or expiry reaches it within the same bound
 * (KEY_RECORD_MAX_AGE_MS). A 503 when the tenants object cannot say, as for a request.
 */
export async function recheckKey(caller: Extract<Caller, { kind: "key" }>, env: Env, ctx: WaitUntil): Promise<KeyLookup> {
  return usableKey(await lookupKey(env, ctx, caller.hash));
}

/**
 * The admin API: the admin key only. No other door's key administers anything, even when an
 * operator set it alike: not a client's (the master key), nor the register key every GPU server
 * holds, nor a Prometheus scraper's metrics key.
 */
export async function authenticateAdmin(req: Request, config: LoadedConfig, env: Env): Promise<void> {
  const { adminKeyEnv, masterKeyEnv, registerKeyEnv, metricsKeyEnv } = config.auth;
  await requireKey(req, config, env, ["adminKeyEnv"], "admin key");
  const off = "the admin API is off";
  refuseIfClientKey(env, masterKeyEnv, adminKeyEnv, "admin key", off);
  refuseIfAlike(env, adminKeyEnv, "admin key", registerKeyEnv, "register key", off);
  refuseIfAlike(env, adminKeyEnv, "admin key", metricsKeyEnv, "metrics key", off);
}

/**
 * A Prometheus scrape: the metrics key, or the admin key. Neither may be the client key (the
 * master key), which would open the fleet's counters to every client.
 */
export async function authenticateMetrics(req: Request, config: LoadedConfig, env: Env): Promise<void> {
  const { metricsKeyEnv, adminKeyEnv, masterKeyEnv } = config.auth;
  await requireKey(req, config, env, ["metricsKeyEnv", "adminKeyEnv"], "metrics key");
  refuseIfClientKey(env, masterKeyEnv, metricsKeyEnv, "metrics key", "/metrics is off");
  refuseIfClientKey(env, masterKeyEnv, adminKeyEnv, "admin key", "/metrics is off");
}

/**
 * A GPU server's heartbeat: the register key, or the admin key. Neither may be the client key (the
 * master key): every client could then register a server at its own address and be sent other
 * clients' prompts. Nor may the register key be the metrics key, which a Prometheus scraper holds,
 * for the same reason; and while the admin key is the metrics key (the admin API is off then) the
 * register key alone is taken, so the scraper's key registers nothing and a register key of its
 * own works on.
 */
export async function authenticateRegistration(req: Request, config: LoadedConfig, env: Env): Promise<void> {
  const { registerKeyEnv, adminKeyEnv, masterKeyEnv, metricsKeyEnv } = config.auth;
  const adminIsMetrics = alike(env, adminKeyEnv, metricsKeyEnv);
  const accepted: KeyField[] = adminIsMetrics ? ["registerKeyEnv"] : ["registerKeyEnv", "adminKeyEnv"];
  try {
    await requireKey(req, config, env, accepted, "register key");
  } catch (err) {
    if (adminIsMetrics) await logAdminKeyRefused(req, config, env);
    throw err;
  }
  const off = "heartbeats are off";
  refuseIfClientKey(env, masterKeyEnv, registerKeyEnv, "register key", off);
  refuseIfClientKey(env, masterKeyEnv, adminKeyEnv, "admin key", off);
  refuseIfAlike(env, registerKeyEnv, "register key", metricsKeyEnv, "metrics key", off);
}

/** Whether this isolate has logged a heartbeat refused for bearing the admin key while it is the metrics key. */
let loggedAdminIsMetrics = false;

/**
 * A heartbeat with the admin key, refused while that key is the metrics key's value, gets the 401
 * any wrong key gets (a scraper learns nothing); the operator, whose servers stop registering,
 * is told why in the log: once per isolate, naming the settings, never the value.
 */
async function logAdminKeyRefused(req: Request, config: LoadedConfig, env: Env): Promise<void> {
  if (loggedAdminIsMetrics) return;
  let given: string;
  try {
    given = bearer(req);
  } catch {
    return;
  }
  if (!(await matches(given, config, env, ["adminKeyEnv"], "admin key"))) return;
  loggedAdminIsMetrics = true;
  console.error("kvgate: heartbeats with the admin key are refused while it equals the metrics key (auth.adminKeyEnv and auth.metricsKeyEnv name secrets of one value): a GPU server registers with the register key (auth.registerKeyEnv), or give the admin key a value of its own");
}

/** A key of another door set to the client key's value opens nothing: every client would hold it. */
function refuseIfClientKey(env: Env, masterKeyEnv: string, name: string, what: string, off: string): void {
  refuseIfAlike(env, name, what, masterKeyEnv, "client key", off);
}

/**
 * A key set to the value of a key of a door that opens less (`other`) opens nothing: whoever holds
 * that one would hold both. Two secrets are compared, never what a request gave.
 */
function refuseIfAlike(env: Env, name: string, what: string, other: string, otherWhat: string, off: string): void {
  if (alike(env, name, other)) throw unauthorized(`the ${what} (${name}) must differ from the ${otherWhat} (${other}); ${off} until it does`);
}

/** Two secrets set to one value (an unset or empty one is like none). */
function alike(env: Env, name: string, other: string): boolean {
  const value = secretOf(env, name);
  return value !== undefined && value === env[other];
}

/** The value of the secret `name`, or undefined when it is not set (an empty one is like none). */
function secretOf(env: Env, name: string): string | undefined {
  const value = env[name];
  return typeof value === "string" && value !== "" ? value : undefined;
}
