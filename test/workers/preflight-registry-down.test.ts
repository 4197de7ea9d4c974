import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect, it, vi } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { tenants } from "./tenants.ts";

/**
 * A browser page calling the gateway while an isolate's first read of the fleet fails (the
 * registry overloaded, or being reset around a deploy): README promises a 503
 * `routing_unavailable` with `Retry-After: 1`. A page's call is preflighted (Authorization is not
 * a header a page may send unasked), and a preflight the gateway answers with that 503 fails in
 * the browser as a CORS error: the request is never sent, and the page cannot tell an outage to
 * retry from a misconfiguration. The registry is a stand-in whose every call fails, as in
 * registry-outage.test.ts; every call here gets it, so this file's isolate never holds a fleet and
 * each call is an isolate's first.
 */

let registryReads = 0;
const overloaded = async () => {
  registryReads++;
  return Promise.reject(Object.assign(new Error("Durable Object is overloaded. Too many requests queued."), { overloaded: true }));
};
const down = { getByName: () => ({ records: overloaded, record: overloaded, command: overloaded, snapshot: overloaded }) };

async function call(init: RequestInit): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request("https://kvgate.test/v1/chat/completions", init), { ...env, FLEET: down } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

/** What a browser sends before `fetch(gw + "/v1/chat/completions", {method: "POST", headers: {authorization, "content-type"}})` from `origin`. */
const preflight = (origin: string) => call({ method: "OPTIONS", headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" } });

it("a page's preflight is granted as the app grants it, with no fleet read; its request's 503 is readable by the page", async () => {
  vi.spyOn(console, "error").mockImplementation(() => undefined);
  const keyPage = "https://registry-down-page.example";
  const made = await tenants().create({ origins: [keyPage] });
  if (!made.ok) throw new Error(made.message);

  // The config's page (cors.allowedOrigins), and a page only a virtual key's origins list.
  for (const origin of ["https://app.example", keyPage]) {
    const res = await preflight(origin);
    expect([origin, res.status, res.headers.get("access-control-allow-origin")]).toEqual([origin, 204, origin]);
    expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("authorization");
  }
  expect(registryReads).toBe(0);

  // The request the preflight let through: the 503 to retry, which the key's page reads.
  const res = await call({
    method: "POST",
    headers: { authorization: `Bearer ${made.value.key}`, "content-type": "application/json", origin: keyPage },
    body: JSON.stringify({ model: "routing", messages: [{ role: "user", content: "hello" }] }),
  });
  expect(res.status).toBe(503);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("routing_unavailable");
  expect(res.headers.get("retry-after")).toBe("1");
  expect(res.headers.get("access-control-allow-origin")).toBe(keyPage);
  expect(res.headers.get("access-control-expose-headers")).toContain("retry-after");

  // A page neither grants is answered as before: the 503, readable by no page.
  const stranger = await preflight("https://stranger.example");
  expect(stranger.status).toBe(503);
  expect(stranger.headers.get("access-control-allow-origin")).toBeNull();
});
