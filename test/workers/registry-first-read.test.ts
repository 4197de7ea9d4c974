import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect, it } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";

/**
 * An isolate's first request, which reads the fleet from the registry, with the registry failing.
 * The runtime cannot be made to fail a Durable Object call on purpose, so the registry's binding is
 * a stand-in whose every call throws (as in registry-outage.test.ts); this file's isolate has read
 * no fleet before, which is the case under test.
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
