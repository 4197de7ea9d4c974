import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { admin, ok } from "./admin.ts";

/**
 * A secret a config deployment names, taken away after the fleet took the config's modelGroups:
 * the operator moved the fleet on through the admin API (here, removed one of the deployments
 * that name it), then ran `wrangler secret delete`. The next Worker version starts with the same
 * config and without the secret. What the fleet no longer holds must stop nothing, and what it
 * still holds fails only the requests routed to it (README → Fleet registry), never the whole
 * gateway. The new version's isolate is called with the env it would have and the config as its
 * own text (another serialisation of the same modelGroups, so nothing this file's isolate loaded
 * before stands in for it).
 */

const SECRET = "ACCESS_CLIENT_SECRET";
const config = JSON.parse(env.KVGATE_CONFIG) as Record<string, unknown>;
/** The config error a deploy lacking a secret its modelGroups name answers with, to anyone: its kind, never its name. */
const LACKS_A_SECRET = "gateway misconfigured: config: modelGroups name a secret this Worker lacks or cannot send (the Worker's log says which: npx wrangler tail --env production; npm run check-config lists those the config reads)";
const withoutSecret = { ...env, [SECRET]: undefined, KVGATE_CONFIG: JSON.stringify(config, null, 1) } as unknown as Env;

afterEach(() => {
  vi.restoreAllMocks();
});

async function call(path: string, init: RequestInit = {}): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`https://kvgate.test${path}`, init), withoutSecret, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

const chat = (model: string) =>
  call("/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 4, messages: [{ role: "user", content: "still there?" }] }),
  });

describe("a secret deleted after the fleet took the config's deployments that name it", () => {
  it("fails only requests routed to a deployment that still names it: other groups, /health and the admin API answer", async () => {
    // With the secret still set: the operator removes one of the config's deployments naming it.
    await ok(admin("/admin/v1/groups/vpc-realtime/deployments/gpu-private", { method: "DELETE" }));
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);

    const healthy = await chat("routing");
    expect(healthy.status, await healthy.clone().text()).toBe(200);
    expect((await call("/health")).status).toBe(200);
    const status = await call("/admin/v1/status", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } });
    expect(status.status, await status.clone().text()).toBe(200);
    expect(((await status.json()) as { groups: { name: string }[] }).groups.map((g) => g.name)).toContain("vpc");

    // The deployment the fleet still holds: a 500 naming what it lacks, for its own requests only.
    const lacking = await chat("vpc");
    expect(lacking.status).toBe(500);
    const { error } = (await lacking.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe("config_invalid");
    expect(error.message).toContain(`names ${SECRET}, which is not set`);
    expect(error.message).not.toContain("modelGroups[");
    for (const text of [error.message, errors.mock.calls.flat().map(String).join("\n")]) expect(text).not.toContain(env.ACCESS_CLIENT_ID);
  });
});

describe("a deploy whose modelGroups lack a secret, before the fleet took them", () => {
  it("answers the client API with the config error, and leaves the admin API and /health open to see what became of them", async () => {
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    // Other modelGroups than the fleet took: this deploy's seed, which the registry refuses without the secret.
    const deploy = { ...config, modelGroups: [{ name: "new-vpc", deployments: [{ baseUrl: "https://gpu.example", model: "m", headersFromEnv: { "CF-Access-Client-Secret": SECRET } }] }] };
    const deployed = { ...withoutSecret, KVGATE_CONFIG: JSON.stringify(deploy) } as Env;
    const ask = async (path: string, key: string) => {
      const ctx = createExecutionContext();
      const res = await worker.fetch(new Request(`https://kvgate.test${path}`, { headers: { authorization: `Bearer ${key}`, origin: "https://app.example" } }), deployed, ctx);
      await waitOnExecutionContext(ctx);
      return res;
    };
    const models = await ask("/v1/models", env.KVGATE_MASTER_KEY);
    expect(models.status).toBe(500);
    expect(models.headers.get("access-control-allow-origin")).toBe("https://app.example");
    const { error } = (await models.json()) as { error: { code: string; message: string } };
    expect(error).toMatchObject({ code: "config_invalid", message: LACKS_A_SECRET });
    expect((await ask("/health", "")).status).toBe(200);
    expect((await ask("/admin/v1/status", env.KVGATE_ADMIN_KEY)).status).toBe(200);
  });

  it("tells a caller with no key no secret's name, a secret pasted where its name goes included: the Worker's log names it (review s67)", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    // A Cloudflare Access client secret (64 hex characters) pasted for the name: starting with a letter, it is a name as far as the config's rules can tell.
    const pasted = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const deploy = { ...config, modelGroups: [{ name: "new-vpc", deployments: [{ baseUrl: "http://10.1.2.3:8000", model: "m", binding: "NO_SUCH_VPC", headersFromEnv: { "CF-Access-Client-Secret": pasted } }] }] };
    const deployed = { ...withoutSecret, KVGATE_CONFIG: JSON.stringify(deploy) } as Env;
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request("https://kvgate.test/v1/models"), deployed, ctx);
    await waitOnExecutionContext(ctx);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    expect([res.status, error.code]).toEqual([500, "config_invalid"]);
    for (const name of [pasted, "NO_SUCH_VPC", "CF-Access-Client-Secret"]) expect(error.message).not.toContain(name);
    expect(error.message).toBe("gateway misconfigured: config: modelGroups name a Workers VPC binding and a secret this Worker lacks or cannot send (the Worker's log says which: npx wrangler tail --env production; npm run check-config lists those the config reads)");
    const logged = errors.mock.calls.flat().map(String).join("\n");
    expect(logged).toContain(`modelGroups[0].deployments[0].headersFromEnv.CF-Access-Client-Secret names ${pasted}, which is not set`);
    expect(logged).toContain('modelGroups[0].deployments[0].binding "NO_SUCH_VPC" is not a Workers VPC binding of this Worker');
  });

  it("answers every client path with it, vLLM's outside /v1 too, and leaves the operator's views open", async () => {
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const deploy = { ...config, modelGroups: [{ name: "new-vpc", deployments: [{ baseUrl: "https://gpu.example", model: "m", headersFromEnv: { "CF-Access-Client-Secret": SECRET } }] }] };
    const deployed = { ...withoutSecret, KVGATE_CONFIG: JSON.stringify(deploy) } as Env;
    const send = async (method: string, path: string, key: string, body?: unknown) => {
      const ctx = createExecutionContext();
      const init: RequestInit = { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) };
      const res = await worker.fetch(new Request(`https://kvgate.test${path}`, init), deployed, ctx);
      await waitOnExecutionContext(ctx);
      return res;
    };
    // The same model by its /v1 path and by vLLM's own: the error says what the deploy lacks on each, not a model not found.
    const score = { model: "new-vpc", text_1: "a", text_2: "b" };
    const rerank = { model: "new-vpc", query: "a", documents: ["b"] };
    for (const [path, body] of [["/v1/score", score], ["/score", score], ["/v1/rerank", rerank], ["/rerank", rerank], ["/v2/rerank", rerank]] as const) {
      const res = await send("POST", path, env.KVGATE_MASTER_KEY, body);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect([path, res.status, error.code, error.message]).toEqual([path, 500, "config_invalid", LACKS_A_SECRET]);
    }
    // A path no route serves is answered so too: the gateway's cause, not a 404 a client would look into.
    expect((await send("POST", "/chat/completions", env.KVGATE_MASTER_KEY, {})).status).toBe(500);
    // The operator's views of the fleet: what became of the deploy's groups.
    expect((await send("GET", "/v1/kvgate/status", env.KVGATE_MASTER_KEY)).status).toBe(200);
    expect((await send("GET", "/metrics", env.KVGATE_ADMIN_KEY)).status).toBe(200);
    expect((await send("GET", "/admin/v1/groups", env.KVGATE_ADMIN_KEY)).status).toBe(200);
  });

  it("grants a page's preflight as the app does, so the page reads the 500; a virtual key's page too", async () => {
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const deploy = { ...config, modelGroups: [{ name: "new-vpc", deployments: [{ baseUrl: "https://gpu.example", model: "m", headersFromEnv: { "CF-Access-Client-Secret": SECRET } }] }] };
    const deployed = { ...withoutSecret, KVGATE_CONFIG: JSON.stringify(deploy) } as Env;
    const send = async (method: string, headers: Record<string, string>) => {
      const ctx = createExecutionContext();
      const res = await worker.fetch(new Request("https://kvgate.test/v1/models", { method, headers }), deployed, ctx);
      await waitOnExecutionContext(ctx);
      return res;
    };
    // What a browser sends before a GET /v1/models with Authorization from `origin`.
    const preflight = (origin: string) => send("OPTIONS", { origin, "access-control-request-method": "GET", "access-control-request-headers": "authorization" });
    const keyPage = "https://secret-lost-page.example";
    const { key } = await ok<{ key: string }>(admin("/admin/v1/keys", { method: "POST", json: { origins: [keyPage] } }), 201);

    // The config's page (cors.allowedOrigins), and a page only a virtual key's origins list.
    for (const origin of ["https://app.example", keyPage]) {
      const res = await preflight(origin);
      expect([origin, res.status, res.headers.get("access-control-allow-origin")]).toEqual([origin, 204, origin]);
      expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("authorization");
    }
    // The request it let through: the config error, readable by the key's page.
    const models = await send("GET", { authorization: `Bearer ${key}`, origin: keyPage });
    expect(models.status).toBe(500);
    expect(models.headers.get("access-control-allow-origin")).toBe(keyPage);
    const { error } = (await models.json()) as { error: { code: string; message: string } };
    expect(error).toMatchObject({ code: "config_invalid", message: LACKS_A_SECRET });
    // A page neither grants is answered as before: the 500, readable by no page.
    const stranger = await preflight("https://stranger.example");
    expect(stranger.status).toBe(500);
    expect(stranger.headers.get("access-control-allow-origin")).toBeNull();
  });
});
