import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it } from "vitest";
import type { DeploymentRow } from "../../src/fleet/admin-api.ts";
import type { FleetRegistryRpc } from "../../src/fleet/protocol.ts";
import type { Env } from "../../workers/env.ts";
import worker from "../../workers/gateway/index.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";

/**
 * A read of one group through the admin API (what the dashboard polls every second, and
 * `deployments drain --wait` every 250 ms) takes one group's record from the fleet registry, not
 * the whole fleet's: the registry's one thread also serves every heartbeat and fleet read.
 * The registry's binding is the real one, wrapped to count the groups each of its answers carries.
 */

const fleetUrls = inject("upstreams").fleetUrls;
const GROUPS = 200;

/** The number of groups each answer of the registry carried to the admin route, in order. */
let carried: number[] = [];

/** The real registry, its answers counted; `withoutRecord`: as an object of the release before `record()` was, which lacks the method. */
function countingRegistry(withoutRecord = false): unknown {
  return {
    getByName: (name: string) => {
      const real = env.FLEET.getByName(name);
      const stub: Partial<Record<keyof FleetRegistryRpc, unknown>> = {
        snapshot: () => real.snapshot(),
        command: (cmd: Parameters<FleetRegistryRpc["command"]>[0]) => real.command(cmd),
        records: async () => {
          const r = await real.records();
          carried.push(r.groups.length);
          return r;
        },
      };
      if (!withoutRecord) {
        stub.record = async (group: string) => {
          const r = await real.record(group);
          carried.push(r === null ? 0 : 1);
          return r;
        };
      } else {
        // What the runtime throws when an object lacks the RPC method called (a Worker of the next release during a deploy).
        stub.record = () => (real as unknown as { noSuchMethodOfThisRelease(): Promise<never> }).noSuchMethodOfThisRelease();
      }
      return stub;
    },
  };
}

async function read(path: string, registry: unknown): Promise<Response> {
  const ctx = createExecutionContext();
  const req = new Request(`https://kvgate.test/admin/v1${path}`, { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } });
  const res = await worker.fetch(req, { ...env, FLEET: registry } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

describe("a read of one group through the admin API", () => {
  it("takes that group's record from the registry, not the whole fleet's, however many groups it holds", async () => {
    const exported = await ok<{ rev: number; modelGroups: unknown[] }>(admin("/admin/v1/fleet"));
    const added = Array.from({ length: GROUPS }, (_, i) => ({ name: `many-${i}`, deployments: [{ id: "d", baseUrl: fleetUrls[0], model: UPSTREAM_MODEL }] }));
    await ok(admin("/admin/v1/fleet", { method: "PUT", json: { rev: exported.rev, modelGroups: [...exported.modelGroups, ...added] } }));

    for (const path of ["/groups/many-7/decisions", "/groups/many-7", "/groups/many-7/deployments", "/groups/many-7/deployments/d"]) {
      carried = [];
      const res = await read(path, countingRegistry());
      expect(res.status, `${path}: ${await res.clone().text()}`).toBe(200);
      await res.text();
      expect(carried, path).toEqual([1]);
    }
    carried = [];
    const missing = await read("/groups/no-such-group/decisions", countingRegistry());
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe("group_not_found");
    expect(carried).toEqual([0]);
  });

  it("still answers from an object of the release before, which lacks record(): from its whole records, as before", async () => {
    const res = await read("/groups/many-7/deployments/d", countingRegistry(true));
    const row = await ok<DeploymentRow & { rev: number }>(res);
    expect(row).toMatchObject({ id: "d", model: UPSTREAM_MODEL });
    const missing = await read("/groups/no-such-group", countingRegistry(true));
    expect(missing.status).toBe(404);
    await missing.text();
  });
});
