import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect, it } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";

/**
 * Answers given before the app, or around it: an isolate's first request, which reads the fleet
 * from the registry, with the registry failing; a config the Worker cannot load; a virtual key
 * with the tenants object failing. The runtime cannot be made to fail a Durable Object call on
 * purpose, so the failing binding is a stand-in whose calls throw (as in registry-outage.test.ts);
 * this file's isolate has read no fleet before, which the first case needs.
 */

const failingRegistry = {
  getByName: () => ({
    snapshot: async () => {
      throw new Error("Durable Object is overloaded. Too many requests queued.");
    },
  }),
};

it("the 503 says which request it was and is readable by the config's CORS origins", async () => {
  const page = "https://app.example";
  const config = { ...(JSON.parse(env.KVGATE_CONFIG) as Record<string, unknown>), cors: { allowedOrigins: [page] } };
  const ask = async (origin: string, requestId: string) => {
    const ctx = createExecutionContext();
    const req = new Request("https://kvgate.test/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json", origin, "x-request-id": requestId },
      body: JSON.stringify({ model: "routing", messages: [{ role: "user", content: "hello" }] }),
    });
    const res = await worker.fetch(req, { ...env, KVGATE_CONFIG: JSON.stringify(config), FLEET: failingRegistry } as unknown as Env, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  };
  const res = await ask(page, "req-first-read");
  expect(res.status).toBe(503);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("routing_unavailable");
  expect(res.headers.get("x-request-id")).toBe("req-first-read");
  expect(res.headers.get("access-control-allow-origin")).toBe(page);
  expect(res.headers.get("access-control-expose-headers")).toContain("x-request-id");
  const other = await ask("https://elsewhere.example", "req-other");
  expect(other.status).toBe(503);
  expect(other.headers.get("access-control-allow-origin")).toBeNull();
  expect(other.headers.get("vary")).toMatch(/origin/i);
  expect(other.headers.get("x-request-id")).toBe("req-other");
});

it("a config the Worker cannot load: its 500 says which request it was", async () => {
  const ctx = createExecutionContext();
  const req = new Request("https://kvgate.test/v1/models", { headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "x-request-id": "req-bad-config" } });
  const res = await worker.fetch(req, { ...env, KVGATE_CONFIG: "{" } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  expect(res.status).toBe(500);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("config_invalid");
  expect(res.headers.get("x-request-id")).toBe("req-bad-config");
});

it.each([
  ["a key pasted where a secret's name goes", '{"modelGroups": [{"name": "g", "deployments": [{"baseUrl": "https://gpu.example", "model": "m", "apiKeyEnv": sk-live-0123456789abcdef}]}]}', 1, 110],
  ["a short config that is the key alone", "sk-live-0123456789abcdef", 1, 1],
  ["a key on its own line", '{\n  "modelGroups": [],\n  "x": sk-live-0123456789abcdef\n}', 3, 8],
])("a config that is not JSON (%s): its 500, which anyone may get, quotes none of its text, and says where", async (_what, config, line, column) => {
  const ctx = createExecutionContext();
  const req = new Request("https://kvgate.test/v1/models", { headers: { "x-request-id": "req-leak" } });
  const res = await worker.fetch(req, { ...env, KVGATE_CONFIG: config } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  expect(res.status).toBe(500);
  const { error } = (await res.json()) as { error: { code: string; message: string } };
  expect(error.code).toBe("config_invalid");
  expect(error.message).not.toMatch(/0123|live/);
  expect(error.message).toContain(`line ${line} column ${column}`);
});

it("the key store down: a browser key's 503 asks it nothing more (not the keys' origins too)", async () => {
  let origins = 0;
  const failingTenants = {
    getByName: () => ({
      lookup: async () => {
        throw new Error("Durable Object is overloaded. Too many requests queued.");
      },
      origins: async () => {
        origins++;
        throw new Error("Durable Object is overloaded. Too many requests queued.");
      },
    }),
  };
  const ctx = createExecutionContext();
  const req = new Request("https://kvgate.test/v1/models", { headers: { authorization: `Bearer sk-kvg-${"a".repeat(40)}`, origin: "https://app.example" } });
  const res = await worker.fetch(req, { ...env, TENANTS: failingTenants } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  expect(res.status).toBe(503);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("key_store_unavailable");
  expect(origins).toBe(0);
});
