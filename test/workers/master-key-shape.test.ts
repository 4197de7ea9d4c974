import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect, it } from "vitest";
import { newKey } from "../../src/tenants/key-format.ts";
import type { Env } from "../../workers/env.ts";
import worker from "../../workers/gateway/index.ts";

/**
 * A master key shaped like a virtual key (`sk-kvg-` and 40 letters and digits) while the tenants
 * object cannot be read: its requests are the master key's, answered without asking the object,
 * as the README says the master key's are; a virtual key's get the 503 key_store_unavailable.
 * (test/e2e/master-key-shape.test.ts: the same key, the tenants object up.)
 */

it("a master key shaped like a virtual key is the master key's, not refused while the tenants object is down", async () => {
  const master = newKey();
  let lookups = 0;
  const overloaded = () => new Error("Durable Object is overloaded. Too many requests queued.");
  const down = { getByName: () => ({ lookup: async () => (lookups++, Promise.reject(overloaded())), origins: async () => Promise.reject(overloaded()) }) };
  const gatewayEnv = { ...env, KVGATE_MASTER_KEY: master, TENANTS: down } as unknown as Env;
  const status = async (key: string): Promise<Response> => {
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request("https://kvgate.test/v1/kvgate/status", { headers: { authorization: `Bearer ${key}` } }), gatewayEnv, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  };
  const res = await status(master);
  expect(res.status).toBe(200);
  expect(lookups).toBe(0);
  const other = await status(newKey());
  expect([other.status, ((await other.json()) as { error: { code: string } }).error.code]).toEqual([503, "key_store_unavailable"]);
  expect(lookups).toBe(1);
});
