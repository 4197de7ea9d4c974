import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it } from "vitest";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import worker from "../../workers/gateway/index.ts";
import { admin, ok } from "./admin.ts";
import { expectIdle } from "./gateway.ts";
import { tenants } from "./tenants.ts";

/**
 * A fallback group changed since the isolate read the fleet, met by a request: its routing object
 * knows it newer, and the request reads the fleet again (proxy.ts GroupPath.readAgain). The group
 * as it now is must be checked against the request's key as the isolate's was when it fell back
 * (fallbackFor): here its pricing was taken away, so a key whose only budget is in dollars, which
 * such a group would serve for $0, is passed over to the next fallback. The change is made in the
 * registry, not through this isolate's admin API (which reads the fleet again at once), as through
 * another instance.
 */

const fleet = inject("upstreams").fleetUrls;
const PRICING = { promptUsdPerMillion: 1, completionUsdPerMillion: 1 };

async function ask(key: string, model: string): Promise<Response> {
  const ctx = createExecutionContext();
  const req = new Request("https://kvgate.test/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 2 }),
  });
  const res = await worker.fetch(req, env, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

describe("a fallback group whose pricing was taken away since the isolate read the fleet", () => {
  it("is passed over for a key whose only budget is in dollars when the request reads it again, as the isolate would have", async () => {
    // A group with no server that takes requests: its object refuses, and the request falls back.
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "reread-own", pricing: PRICING, deployments: [{ id: "off", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } }), 201);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "reread-fallback", pricing: PRICING, deployments: [{ id: "sim-1", baseUrl: fleet[1], model: UPSTREAM_MODEL }] } }), 201);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "reread-priced", pricing: PRICING, deployments: [{ id: "sim-2", baseUrl: fleet[2], model: UPSTREAM_MODEL }] } }), 201);
    await ok(admin("/admin/v1/groups/reread-own", { method: "PATCH", json: { fallbacks: ["reread-fallback", "reread-priced"] } }));
    await ok(admin("/admin/v1/groups/reread-own/deployments/off/disable", { method: "POST" }));
    const issued = await tenants().create({ name: "dollars alone", budget_usd: 5 });
    if (!issued.ok) throw new Error(issued.message);
    const key = issued.value.key;

    // This isolate's fleet, read now: the first fallback priced, and serving the key.
    await new Promise((r) => setTimeout(r, 1100));
    const before = await ask(key, "reread-own");
    expect(before.status, await before.clone().text()).toBe(200);
    expect(before.headers.get("x-kvgate-group")).toBe("reread-fallback");
    await before.text();

    // Through another instance: the first fallback's pricing taken away (its routing object told at once).
    const changed = await env.FLEET.getByName(REGISTRY_NAME).command({ op: "update-group", group: "reread-fallback", patch: { pricing: null } });
    expect(changed).toMatchObject({ ok: true, routing: "applied" });

    const after = await ask(key, "reread-own");
    expect(after.status, await after.clone().text()).toBe(200);
    expect(after.headers.get("x-kvgate-group")).toBe("reread-priced");
    await after.text();

    // The last fallback's too: none is left, and the request gets the 503 of a model no backend serves, not a $0 answer.
    await env.FLEET.getByName(REGISTRY_NAME).command({ op: "update-group", group: "reread-priced", patch: { pricing: null } });
    const none = await ask(key, "reread-own");
    const { error } = (await none.json()) as { error: { code: string } };
    expect([none.status, error.code]).toEqual([503, "no_healthy_backend"]);
    await expectIdle("reread-fallback");
    await expectIdle("reread-priced");
  });
});

/**
 * The same change met by a request whose own group failed first: with no fallback left that the
 * key may use, the answer is that failure, as when the isolate already holds the change (the
 * README: "the client gets its own model's error instead"), not a 503 "no healthy backend".
 */
describe("a request whose own group failed, its last fallback's pricing taken away since the isolate read the fleet", () => {
  /** `own` (one deployment, `backend`) falling back to `fb`, priced, which then loses its pricing in the registry; a dollars-only key's answer for `own` then. */
  async function answerAfterPricingGone(own: string, fb: string, backend: { id: string; baseUrl: string }): Promise<{ status: number; code: string | undefined }> {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: fb, pricing: PRICING, deployments: [{ id: "sim", baseUrl: fleet[2], model: UPSTREAM_MODEL }] } }), 201);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: own, pricing: PRICING, fallbacks: [fb], deployments: [{ ...backend, model: UPSTREAM_MODEL }] } }), 201);
    const issued = await tenants().create({ name: "dollars alone", budget_usd: 5 });
    if (!issued.ok) throw new Error(issued.message);
    const key = issued.value.key;
    // This isolate's fleet, read now and past the second within which it is not read again: the fallback priced.
    await new Promise((r) => setTimeout(r, 1100));
    const warm = await ask(key, fb);
    expect(warm.status, await warm.clone().text()).toBe(200);
    await warm.text();
    const changed = await env.FLEET.getByName(REGISTRY_NAME).command({ op: "update-group", group: fb, patch: { pricing: null } });
    expect(changed).toMatchObject({ ok: true, routing: "applied" });
    const res = await ask(key, own);
    const { error } = (await res.json()) as { error?: { code?: string } };
    return { status: res.status, code: error?.code };
  }

  it("gets its own backend's 502 (a refused connection), not a 503 no_healthy_backend", async () => {
    const answer = await answerAfterPricingGone("reread-dead-own", "reread-dead-fb", { id: "dead", baseUrl: inject("upstreams").deadUrl });
    expect([answer.status, answer.code]).toEqual([502, "upstream_error"]);
    await expectIdle("reread-dead-own");
    await expectIdle("reread-dead-fb");
  });

  it("gets 404 endpoint_not_served when its backends lack the endpoint, not a 503 to retry", async () => {
    const answer = await answerAfterPricingGone("reread-lacking-own", "reread-lacking-fb", { id: "lacking", baseUrl: `${fleet[1] as string}/dropped` });
    expect([answer.status, answer.code]).toEqual([404, "endpoint_not_served"]);
    await expectIdle("reread-lacking-own");
    await expectIdle("reread-lacking-fb");
  });
});
