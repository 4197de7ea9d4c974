import { beforeAll, describe, expect, inject, it, vi } from "vitest";
import { ModelGroup } from "../../durable-objects/model-group.ts";
import type { DeploymentList, FleetStatus } from "../../src/fleet/admin-api.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";

/**
 * GET /admin/v1/status over a fleet of many groups (the test config's and eighty more): what it
 * asks of the groups' routing objects, and what it answers.
 */

const fleet = inject("upstreams").fleetUrls;
const names = Array.from({ length: 80 }, (_, i) => `status-many-${i}`);

beforeAll(async () => {
  for (const name of names) await ok(admin("/admin/v1/groups", { method: "POST", json: { name, deployments: [{ id: `${name}-d`, baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
}, 60_000);

describe("GET /admin/v1/status of many groups", () => {
  it("asks a bounded number of groups' routing objects at once, not every group's together", async () => {
    const status = ModelGroup.prototype.status;
    let under = 0;
    let most = 0;
    // Each object's answer takes a while, as one across the network does: the calls overlap. (An
    // RPC's caller awaits the answer either way: the method may return it later.)
    const slow = async function (this: ModelGroup, ...args: Parameters<typeof status>) {
      most = Math.max(most, ++under);
      await new Promise((r) => setTimeout(r, 20));
      under--;
      return status.apply(this, args);
    };
    const spy = vi.spyOn(ModelGroup.prototype, "status").mockImplementation(slow as unknown as typeof status);
    try {
      await ok(admin("/admin/v1/status"));
      expect(spy.mock.calls.length).toBeGreaterThan(names.length);
    } finally {
      spy.mockRestore();
    }
    // 32 groups at once, a sharded group's objects (two, in the test config) asked together.
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(32 * 2);
  });

  it("gives each group's deployments as its deployments route lists them, beside the counts it always gave", async () => {
    const status = await ok<FleetStatus>(admin("/admin/v1/status"));
    for (const name of names.slice(0, 5)) {
      const g = status.groups.find((x) => x.name === name);
      const list = await ok<DeploymentList>(admin(`/admin/v1/groups/${name}/deployments`));
      expect(g).toMatchObject({ rev: list.rev, deployments: 1, takingRequests: 1, inFlight: 0 });
      expect(g?.deploymentRows).toEqual(list.data);
    }
  });
});
