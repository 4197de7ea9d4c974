import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect, it, vi } from "vitest";
import { GatewayError } from "../../src/openai/errors.ts";
import { keyHash } from "../../src/tenants/key-format.ts";
import type { KeyLookup } from "../../src/tenants/protocol.ts";
import { TENANTS_NAME } from "../../src/tenants/tenants-name.ts";
import type { Env } from "../../workers/env.ts";
import { lookupKey } from "../../workers/gateway/key-cache.ts";
import worker from "../../workers/gateway/index.ts";
import { tenants } from "./tenants.ts";

/**
 * The isolate's cache of virtual keys in front of the one tenants object. The object is the real
 * one; the Worker reaches it through a binding that counts the lookups it passes on.
 */

type Lookup = (hash: string) => Promise<KeyLookup | null>;

/** The Worker's bindings with the tenants object's lookups passed through `lookup`, which is given the real one. */
function withLookup(lookup: (hash: string, real: Lookup) => Promise<KeyLookup | null>): Env {
  const real: Lookup = (hash) => env.TENANTS.getByName(TENANTS_NAME).lookup(hash);
  return { ...env, TENANTS: { getByName: () => ({ lookup: (hash: string) => lookup(hash, real) }) } } as unknown as Env;
}

let lookups = 0;
const counted = withLookup((hash, real) => (lookups++, real(hash)));

it("keys nobody issued, however many, never push a key in use out of the cache", async () => {
  const issued = await tenants().create({ name: "in use" });
  if (!issued.ok) throw new Error(issued.message);
  const hash = await keyHash(issued.value.key);
  // The cache's clock stands still: 10,001 reads can outlast the age at which a record in use is
  // read again beside its request (a refresh, not the eviction this is about) on a loaded machine.
  const now = vi.spyOn(Date, "now").mockReturnValue(Date.now());
  const ctx = createExecutionContext();
  expect((await lookupKey(counted, ctx, hash))?.record.id).toBe(issued.value.lookup.record.id);
  expect(lookups).toBe(1);
  // More guesses than the cache holds keys, each asked of the object once.
  const guesses = 10_001;
  for (let i = 0; i < guesses; i++) expect(await lookupKey(counted, ctx, `guess-${i}`)).toBeNull();
  expect(lookups).toBe(1 + guesses);
  // The key in use is answered from the cache still.
  expect((await lookupKey(counted, ctx, hash))?.record.id).toBe(issued.value.lookup.record.id);
  expect(lookups).toBe(1 + guesses);
  // A guess made again is answered from the cache too.
  expect(await lookupKey(counted, ctx, `guess-${guesses - 1}`)).toBeNull();
  expect(lookups).toBe(1 + guesses);
  await waitOnExecutionContext(ctx);
  now.mockRestore();
}, 60_000);

it("while the tenants object fails, a key is looked up at most once a second: a failed read is not tried again by every request, and a record 10 s old gets a 503 until a read succeeds", async () => {
  const issued = await tenants().create({ name: "through an outage" });
  if (!issued.ok) throw new Error(issued.message);
  const hash = await keyHash(issued.value.key);
  let tries = 0;
  let down = false;
  const flaky = withLookup((h, real) => (tries++, down ? Promise.reject(new Error("Durable Object is overloaded")) : real(h)));
  const t0 = Date.now();
  const now = vi.spyOn(Date, "now").mockReturnValue(t0);
  // One request after another, each with its own context waited out (its refresh, if any, done).
  const request = async (): Promise<string> => {
    const ctx = createExecutionContext();
    try {
      return (await lookupKey(flaky, ctx, hash))?.record.id ?? "none";
    } catch (err) {
      return err instanceof GatewayError ? `${err.status} ${err.code}` : "thrown";
    } finally {
      await waitOnExecutionContext(ctx);
    }
  };
  const id = issued.value.lookup.record.id;
  expect(await request()).toBe(id);
  expect(tries).toBe(1);
  down = true;
  // 6 s old: used as it is, a refresh beside the request; it fails, and 50 requests within the second try none again.
  now.mockReturnValue(t0 + 6_000);
  for (let i = 0; i < 50; i++) expect(await request()).toBe(id);
  expect(tries).toBe(2);
  // A second later, one more try.
  now.mockReturnValue(t0 + 7_000);
  for (let i = 0; i < 50; i++) expect(await request()).toBe(id);
  expect(tries).toBe(3);
  // 10 s old: not used (a revocation takes effect within 10 s); a 503 to each, one read a second.
  now.mockReturnValue(t0 + 10_500);
  for (let i = 0; i < 50; i++) expect(await request()).toBe("503 key_store_unavailable");
  expect(tries).toBe(4);
  // A key this isolate never read: a 503 too (not taken for an unknown key's 401), asked once.
  const other = await tenants().create({ name: "first seen in the outage" });
  if (!other.ok) throw new Error(other.message);
  const otherHash = await keyHash(other.value.key);
  for (let i = 0; i < 20; i++) {
    const ctx = createExecutionContext();
    await expect(lookupKey(flaky, ctx, otherHash)).rejects.toMatchObject({ status: 503, code: "key_store_unavailable" });
    await waitOnExecutionContext(ctx);
  }
  expect(tries).toBe(5);
  now.mockReturnValue(t0 + 11_500);
  down = false;
  expect(await request()).toBe(id);
  expect(tries).toBe(6);
  now.mockRestore();
});

it("a record counts its age from when its read was sent: one the tenants object was slow to answer is not used past 10 s after it, so a key revoked meanwhile is refused in time", async () => {
  const issued = await tenants().create({ name: "revoked during a slow read" });
  if (!issued.ok) throw new Error(issued.message);
  const hash = await keyHash(issued.value.key);
  const held: (() => void)[] = [];
  let slow = false;
  const slowly = withLookup(async (h, real) => {
    // The object reads the record when the call comes; its answer is held back, as a slow network's.
    const found = await real(h);
    if (slow) await new Promise<void>((resolve) => held.push(resolve));
    return found;
  });
  const t0 = Date.now();
  const now = vi.spyOn(Date, "now").mockReturnValue(t0);
  const ctx = createExecutionContext();
  expect((await lookupKey(slowly, ctx, hash))?.record.id).toBe(issued.value.lookup.record.id);
  // 5 s old: a refresh goes out beside the request, and its answer takes 4 s to come.
  slow = true;
  now.mockReturnValue(t0 + 5_000);
  expect((await lookupKey(slowly, ctx, hash))?.record.id).toBe(issued.value.lookup.record.id);
  await vi.waitFor(() => expect(held).toHaveLength(1));
  const revoked = await tenants().revoke(issued.value.lookup.record.id);
  expect(revoked.ok).toBe(true);
  now.mockReturnValue(t0 + 9_000);
  slow = false;
  for (const answer of held) answer();
  await waitOnExecutionContext(ctx);
  // 10.5 s after the refresh was sent (6.5 s after its answer came), the key, revoked since, must be read again: refused.
  now.mockReturnValue(t0 + 15_500);
  const after = createExecutionContext();
  expect((await lookupKey(slowly, after, hash))?.record.revokedAt).not.toBeNull();
  await waitOnExecutionContext(after);
  now.mockRestore();
});

it("while the tenants object fails, the keys' origins are asked at most once a second: neither anonymous preflights nor refused requests from a page ask again each, and the origins last read still answer", async () => {
  const page = "https://key-page.example";
  let asked = 0;
  let down = false;
  const tenantsBinding = {
    getByName: () => ({
      lookup: async () => null,
      origins: async () => {
        asked++;
        if (down) throw new Error("Durable Object is overloaded. Too many requests queued.");
        return [page];
      },
    }),
  };
  const gatewayEnv = { ...env, TENANTS: tenantsBinding } as unknown as Env;
  const call = async (origin: string, init: RequestInit): Promise<Response> => {
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request("https://kvgate.test/v1/chat/completions", { ...init, headers: { origin, ...(init.headers as Record<string, string>) } }), gatewayEnv, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  };
  // Anyone may send either: a preflight (no key), or a request with a key that is not one (a 401 asked of no key record).
  const preflight = (origin: string) => call(origin, { method: "OPTIONS", headers: { "access-control-request-method": "POST" } });
  const refused = (origin: string) => call(origin, { method: "POST", headers: { authorization: "Bearer x", "content-type": "application/json" }, body: "{}" });
  // Far past any origins this isolate read before: they are read again first.
  const t0 = Date.now() + 3_600_000;
  const now = vi.spyOn(Date, "now").mockReturnValue(t0);
  expect((await preflight(page)).headers.get("access-control-allow-origin")).toBe(page);
  expect(asked).toBe(1);
  down = true;
  // 10 s old: read again once; it fails, and for a second neither kind of request asks again. The page some key is for is still granted.
  now.mockReturnValue(t0 + 10_000);
  for (let i = 0; i < 25; i++) {
    expect((await preflight(`https://stranger-${i}.example`)).headers.get("access-control-allow-origin")).toBeNull();
    expect((await refused(`https://stranger-${i}.example`)).status).toBe(401);
  }
  expect(asked).toBe(2);
  expect((await preflight(page)).headers.get("access-control-allow-origin")).toBe(page);
  expect(asked).toBe(2);
  // A second later, one more try.
  now.mockReturnValue(t0 + 11_000);
  for (let i = 0; i < 25; i++) expect((await preflight(`https://stranger-${i}.example`)).status).not.toBe(500);
  expect(asked).toBe(3);
  down = false;
  now.mockReturnValue(t0 + 12_000);
  expect((await preflight(page)).headers.get("access-control-allow-origin")).toBe(page);
  expect(asked).toBe(4);
  now.mockRestore();
});

it("the key store down, a key's page is still told so: its 503 (Retry-After) carries the origins last read, asked of no one", async () => {
  const page = "https://outage-page.example";
  let asked = 0;
  let down = false;
  const overloaded = () => new Error("Durable Object is overloaded. Too many requests queued.");
  const tenantsBinding = {
    getByName: () => ({
      lookup: async () => Promise.reject(overloaded()),
      origins: async () => (asked++, down ? Promise.reject(overloaded()) : [page]),
    }),
  };
  const gatewayEnv = { ...env, TENANTS: tenantsBinding } as unknown as Env;
  const call = async (init: RequestInit): Promise<Response> => {
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request("https://kvgate.test/v1/models", { ...init, headers: { origin: page, ...(init.headers as Record<string, string>) } }), gatewayEnv, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  };
  // Far past any origins this isolate read before: the page's preflight reads them.
  const now = vi.spyOn(Date, "now").mockReturnValue(Date.now() + 7_200_000);
  expect((await call({ method: "OPTIONS", headers: { "access-control-request-method": "GET" } })).headers.get("access-control-allow-origin")).toBe(page);
  expect(asked).toBe(1);
  down = true;
  const res = await call({ headers: { authorization: `Bearer sk-kvg-${"b".repeat(40)}` } });
  expect([res.status, res.headers.get("retry-after"), ((await res.json()) as { error: { code: string } }).error.code]).toEqual([503, "1", "key_store_unavailable"]);
  expect(res.headers.get("access-control-allow-origin")).toBe(page);
  expect(asked).toBe(1);
  now.mockRestore();
});
