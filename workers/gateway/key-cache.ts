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
 * earlier or a changed limit takes effect within that bound (plus the read itself).
 */
const REFRESH_AFTER_MS = 5_000;
/** Keys an isolate remembers, and as many keys that do not exist; past it the least recently read goes. */
const MAX_ENTRIES = 10_000;

interface Entry {
  /** null: no such key (remembered too, so guessing one again costs the tenants object nothing more). */
  found: KeyLookup | null;
  readAt: number;
  refreshing: boolean;
}

/**
 * Keys that exist, and keys that do not, apart: anyone can send a key-shaped guess, and guesses
 * enough to fill one cache would push every key in use out of it, each then read again before its
 * request goes on.
 */
const keys = new Map<string, Entry>();
const misses = new Map<string, Entry>();

async function read(env: Env, hash: string): Promise<Entry> {
  const found = await env.TENANTS.getByName(TENANTS_NAME).lookup(hash);
  const entry: Entry = { found, readAt: Date.now(), refreshing: false };
  keys.delete(hash);
  misses.delete(hash);
  const cache = found ? keys : misses;
  cache.set(hash, entry);
  if (cache.size > MAX_ENTRIES) for (const oldest of cache.keys()) { cache.delete(oldest); break; }
  return entry;
}

/** The key whose hash is `hash`, or null when there is none; a 503 when the tenants object cannot say. */
export async function lookupKey(env: Env, ctx: WaitUntil, hash: string): Promise<KeyLookup | null> {
  const e = keys.get(hash) ?? misses.get(hash);
  const age = e ? Date.now() - e.readAt : Infinity;
  if (e && age < MAX_AGE_MS) {
    if (age >= REFRESH_AFTER_MS && !e.refreshing) {
      e.refreshing = true;
      ctx.waitUntil(
        read(env, hash).catch((err: unknown) => {
          e.refreshing = false;
          console.error(`kvgate: refreshing a key record failed: ${(err as Error).message}`);
        }),
      );
    }
    return e.found;
  }
  try {
    return (await read(env, hash)).found;
  } catch (err) {
    console.error(`kvgate: reading a key record failed: ${(err as Error).message}`);
    throw unavailable("the key store is unavailable; try again shortly", "key_store_unavailable");
  }
}

let origins: { set: ReadonlySet<string>; readAt: number } | null = null;

/**
 * The origins some virtual key allows, read at most every MAX_AGE_MS: a preflight carries no key,
 * so it is granted to a page any key is for, and the request that follows is checked against its
 * own key. When the tenants object cannot say, none is granted.
 */
export async function keyOrigins(env: Env): Promise<ReadonlySet<string>> {
  if (origins && Date.now() - origins.readAt < MAX_AGE_MS) return origins.set;
  try {
    origins = { set: new Set(await env.TENANTS.getByName(TENANTS_NAME).origins()), readAt: Date.now() };
    return origins.set;
  } catch (err) {
    console.error(`kvgate: reading the keys' origins failed: ${(err as Error).message}`);
    return new Set();
  }
}
