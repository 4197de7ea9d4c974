import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it } from "vitest";
import { resolveDeployment, resolveGroup } from "../../src/config/resolve.ts";
import { DeploymentSchema, ModelGroupSchema } from "../../src/config/schema.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { status } from "./gateway.ts";

/**
 * A deployment the fleet registry stored before it refused the gateway's own keys (a heartbeat
 * with the register key could name KVGATE_ADMIN_KEY, and be sent it): the request path's own
 * check, for such a deployment that reaches a Worker all the same.
 */

const fleet = inject("upstreams").fleetUrls;

describe("a stored deployment that names one of the gateway's keys", () => {
  it("is never sent the key by a Worker that still has it in its fleet: the request is refused before anything goes out", async () => {
    // A Worker's snapshot that has it (a registry stand-in hands it out, as registry-outage.test.ts does).
    const real = await env.FLEET.getByName(REGISTRY_NAME).snapshot();
    const { deployments: _, ...settings } = ModelGroupSchema.parse({ name: "stale-key", strategy: "round-robin", deployments: [] });
    const spec = DeploymentSchema.parse({ id: "evil", baseUrl: fleet[0], model: UPSTREAM_MODEL, apiKeyEnv: "KVGATE_ADMIN_KEY" });
    const stale = resolveGroup(settings, [resolveDeployment(spec, "active")], real.rev + 1);
    const registry: unknown = { getByName: () => ({ snapshot: async () => ({ rev: real.rev + 1, groups: [...real.groups, stale] }) }) };
    // Past the once-a-second bound on reading the fleet again for a model the isolate does not know.
    await new Promise((r) => setTimeout(r, 1100));
    const ctx = createExecutionContext();
    const req = new Request("https://kvgate.test/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "stale-key", messages: [{ role: "user", content: "hello" }], max_tokens: 2 }),
    });
    const res = await worker.fetch(req, { ...env, FLEET: registry } as Env, ctx);
    await waitOnExecutionContext(ctx);
    const body = await res.text();
    expect(res.status, body).toBe(500);
    expect(JSON.parse(body)).toMatchObject({ error: { code: "config_invalid", message: expect.stringContaining("apiKeyEnv names KVGATE_ADMIN_KEY, the gateway's own key") } });
    expect(body).not.toContain(env.KVGATE_ADMIN_KEY);
    expect((await status("stale-key")).backends[0]?.inFlight).toBe(0);
  });
});
