import { unavailable } from "../../src/openai/errors.ts";
import type { KeyLookup } from "../../src/tenants/protocol.ts";
import { KEY_RECORD_MAX_AGE_MS as MAX_AGE_MS } from "../../src/tenants/key-record.ts";
import { TENANTS_NAME } from "../../src/tenants/tenants-name.ts";
import type { Env, WaitUntil } from "../env.ts";

/**
 * Virtual keys as this isolate last read them from the tenants object, by the key's SHA-256.
 * A record read less than REFRESH_AFTER_MS ago is used as it is; an older one is used while a
 * fresh read goes out beside the request; one MAX_AGE_MS old or more is read again before the
 * request goes on. So a key in steady use costs no call to the tenants object on its requests,
 * and what an isolate acts on was true at most MAX_AGE_MS ago: a revocation, an expiry moved
 * earlier or a changed limit takes effect within that bound (plus the read itself). Past that
 * bound, a key the tenants object cannot be read for is refused with a 503 (fail closed: a key
 * revoked during an outage is not served on), and a read that failed is not tried again for that
 * key within RETRY_AFTER_MS, whatever number of requests come: a slow or overloaded object is not
 * asked once a request.
 */
const REFRESH_AFTER_MS = 5_000;
/** How long after a failed read of a key no other is tried (the 503's Retry-After, 1 s). */
const RETRY_AFTER_MS = 1_000;
/** Keys an isolate remembers, and as many keys that do not exist; past it the least recently read goes. */
const MAX_ENTRIES = 10_000;

interface Entry {
  /** null: no such key (remembered too, so guessing one again costs the tenants object nothing more). */
  found: KeyLookup | null;
  /** When its read was sent; -Infinity for a key whose first read failed (nothing to use: remembered for retryAt). */
  readAt: number;
  refreshing: boolean;
  /** No read of the key before then: its last one failed. */
  retryAt: number;
}

/**
 * Keys that exist, and keys that do not, apart: anyone can send a key-shaped guess, and guesses
 * enough to fill one cache would push every key in use out of it, each then read again before its
 * request goes on.
 */
const keys = new Map<string, Entry>();
const misses = new Map<string, Entry>();

async function read(env: Env, hash: string): Promise<Entry> {
  // Its age counts from when it was asked for: the object answers with the record as it was then or
  // a moment later, so one slow to come is not used longer past a revocation than MAX_AGE_MS.
  const sentAt = Date.now();
  const found = await env.TENANTS.getByName(TENANTS_NAME).lookup(hash);
  const entry: Entry = { found, readAt: sentAt, refreshing: false, retryAt: 0 };
  keys.delete(hash);
  misses.delete(hash);
  remember(found ? keys : misses, hash, entry);
  return entry;
}

function remember(cache: Map<string, Entry>, hash: string, entry: Entry): void {
  cache.set(hash, entry);
  if (cache.size > MAX_ENTRIES) for (const oldest of cache.keys()) { cache.delete(oldest); break; }
}

/**
 * A read of `hash` failed: none is tried again for RETRY_AFTER_MS. `e` is what was cached when it
 * went out; a key never read is remembered among the misses, as nothing to use (an unknown key's
 * entry, as a guess's, is bounded there), unless a read that succeeded meanwhile put it back.
 */
function readFailed(hash: string, e: Entry | undefined): void {
  const retryAt = Date.now() + RETRY_AFTER_MS;
  if (e) e.retryAt = retryAt;
  else if (!keys.has(hash) && !misses.has(hash)) remember(misses, hash, { found: null, readAt: -Infinity, refreshing: false, retryAt });
}

const storeUnavailable = () => unavailable("the key store is unavailable; try again shortly", "key_store_unavailable");

/** The key whose hash is `hash`, or null when there is none; a 503 when the tenants object cannot say. */
export async function lookupKey(env: Env, ctx: WaitUntil, hash: string): Promise<KeyLookup | null> {
  const e = keys.get(hash) ?? misses.get(hash);
  const now = Date.now();
  const age = e ? now - e.readAt : Infinity;
  if (e && age < MAX_AGE_MS) {
    if (age >= REFRESH_AFTER_MS && !e.refreshing && now >= e.retryAt) {
      e.refreshing = true;
      ctx.waitUntil(
        read(env, hash).catch((err: unknown) => {
          e.refreshing = false;
          readFailed(hash, e);
          console.error(`kvgate: refreshing a key record failed: ${(err as Error).message}`);
        }),
      );
    }
    return e.found;
  }
  // Too old to use, and its last read failed a moment ago: refused without asking again.
  if (e && now < e.retryAt) throw storeUnavailable();
  try {
    return (await read(env, hash)).found;
  } catch (err) {
    readFailed(hash, e);
    console.error(`kvgate: reading a key record failed: ${(err as Error).message}`);
    throw storeUnavailable();
  }
}

/** The keys' origins as last read: `readAt` when that read was sent; `retryAt`, no read before then (the last one failed). */
let origins: { set: ReadonlySet<string>; readAt: number; retryAt: number } | null = null;

/**
 * The origins of every virtual key (revoked and expired ones too: Tenants.origins), read at most
 * every MAX_AGE_MS: a preflight carries no key, so it is granted to a page any key is for, and the request that follows is checked against its
 * own key. When the tenants object cannot say, the origins last read answer (none, if this isolate
 * never read them), and they are not asked again for RETRY_AFTER_MS, as a key whose read failed is
 * not: anyone may send a preflight, or a request with a key that is not one, and while the object
 * is overloaded each would else add a call to it. An origin granted from a set older than
 * MAX_AGE_MS lets a page send a request its key then decides: nothing more.
 */
export async function keyOrigins(env: Env): Promise<ReadonlySet<string>> {
  const sentAt = Date.now();
  if (origins && (sentAt - origins.readAt < MAX_AGE_MS || sentAt < origins.retryAt)) return origins.set;
  try {
    const set = new Set(await env.TENANTS.getByName(TENANTS_NAME).origins());
    origins = { set, readAt: sentAt, retryAt: 0 };
    return set;
  } catch (err) {
    const retryAt = Date.now() + RETRY_AFTER_MS;
    origins = origins ? { ...origins, retryAt } : { set: new Set(), readAt: -Infinity, retryAt };
    console.error(`kvgate: reading the keys' origins failed: ${(err as Error).message}`);
    return origins.set;
  }
}

/**
 * The origins of every virtual key as this isolate last read them, asked of no one (none, if it
 * never read them): for an answer the key store being down refuses, which a second call to the
 * failing object would only delay.
 */
export function lastKeyOrigins(): ReadonlySet<string> {
  return origins?.set ?? NO_ORIGINS;
}

const NO_ORIGINS: ReadonlySet<string> = new Set();
