import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import type { DeploymentRow } from "../../src/fleet/admin-api.ts";
import type { GroupRecord } from "../../src/fleet/registry.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok, refused } from "./admin.ts";
import { EVENTUALLY } from "./gateway.ts";
import { storeAsBefore, storedGroup } from "./stored-fleet.ts";

/**
 * A deployment the Worker can no longer reach as it says (a deploy took away a secret it names)
 * answers its own requests with a 500, as before; it stops no other change, and no expiry.
 */

const fleet = inject("upstreams").fleetUrls;
const sim = (i: number, id: string) => ({ id, baseUrl: fleet[i] as string, model: UPSTREAM_MODEL });
const registry = () => env.FLEET.getByName(REGISTRY_NAME);
const row = (group: string, id: string) => ok<DeploymentRow>(admin(`/admin/v1/groups/${group}/deployments/${id}`));
const beat = (json: unknown) => admin("/admin/v1/heartbeats", { method: "POST", json }, env.KVGATE_REGISTER_KEY);

/** Rewrites the group's stored record as `edit` says, then restarts the registry (as a deploy does), which loads it. */
async function restartedWith(group: string, edit: (g: GroupRecord) => void): Promise<void> {
  await runInDurableObject(registry(), (_o, state) => {
    const g = storedGroup(state.storage.sql, group);
    edit(g);
    storeAsBefore(state.storage.sql, g);
  });
  await evictDurableObject(registry());
}

describe("a deployment naming a secret the Worker no longer has", () => {
  it("stops no other change, no heartbeat and no expiry; a change that adds such a deployment is still refused", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "reach", strategy: "round-robin", deployments: [sim(0, "fixed"), { ...sim(1, "keyed"), headersFromEnv: { "x-gpu-key": "GPU_API_KEY" } }] } }), 201);
    await ok(beat({ group: "reach", ...sim(2, "lapsing"), ttlSeconds: 1 }));
    // A deploy renamed the secret: the stored deployment names one this Worker lacks.
    await restartedWith("reach", (g) => {
      const keyed = g.deployments.find((d) => d.spec.id === "keyed");
      if (keyed) keyed.spec.headersFromEnv = { "x-gpu-key": "GPU_KEY_REMOVED" };
    });

    // Other deployments' changes, and other servers' heartbeats, are taken.
    await ok(admin("/admin/v1/groups/reach/deployments/fixed/drain", { method: "POST" }));
    await ok(beat({ group: "reach", ...sim(3, "joining"), ttlSeconds: 60 }));
    await ok(admin("/admin/v1/groups/reach/deployments/fixed/enable", { method: "POST" }));
    // The lapsed server drains, then goes (the registry's alarm, two TTLs after its last heartbeat).
    await vi.waitFor(async () => expect((await admin("/admin/v1/groups/reach/deployments/lapsing")).status).toBe(404), EVENTUALLY);

    // What routing does with the unreachable one is as before: it stays, and is operated like any other.
    expect(await row("reach", "keyed")).toMatchObject({ state: "active" });
    await ok(admin("/admin/v1/groups/reach/deployments/keyed/disable", { method: "POST" }));
    // Put back into routing, it would answer 500s again: refused as a change that adds it would be.
    expect((await refused(admin("/admin/v1/groups/reach/deployments/keyed/enable", { method: "POST" }), 400)).message).toMatch(/headersFromEnv\.x-gpu-key names GPU_KEY_REMOVED, which is not set/);
    // A change that writes an unreachable deployment is refused, naming what it lacks; giving it a secret the Worker has mends it.
    const e = await refused(admin("/admin/v1/groups/reach/deployments", { method: "POST", json: { ...sim(1, "other"), headersFromEnv: { "x-gpu-key": "GPU_KEY_REMOVED" } } }), 400);
    expect(e.message).toMatch(/^headersFromEnv\.x-gpu-key names GPU_KEY_REMOVED, which is not set/);
    expect((await refused(admin("/admin/v1/groups/reach/deployments/keyed", { method: "PATCH", json: { weight: 2 } }), 400)).message).toMatch(/GPU_KEY_REMOVED/);
    await ok(admin("/admin/v1/groups/reach/deployments/keyed", { method: "PATCH", json: { headersFromEnv: { "x-gpu-key": "GPU_API_KEY" } } }));
  });
});
