import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect, it, vi } from "vitest";
import { keyHash } from "../../src/tenants/key-format.ts";
import type { Env } from "../../workers/env.ts";
import { lookupKey } from "../../workers/gateway/key-cache.ts";
import { tenants } from "./tenants.ts";

/**
 * The isolate's cache of virtual keys in front of the one tenants object. The object is the real
 * one; the Worker reaches it through a binding that counts the lookups it passes on.
 */

let lookups = 0;
const counted = {
  ...env,
  TENANTS: {
    getByName: (name: string) => {
      const real = env.TENANTS.getByName(name);
      return { lookup: (hash: string) => (lookups++, real.lookup(hash)) };
    },
  },
} as unknown as Env;

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
