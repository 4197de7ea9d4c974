import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, inject, it, vi } from "vitest";
import { ModelGroup } from "../../durable-objects/model-group.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { gateway } from "./gateway.ts";

/**
 * The reads of the whole fleet — GET /admin/v1/status, GET /metrics, GET /v1/kvgate/status — over
 * a fleet of many groups (the test config's and eighty more): what they ask of the groups' routing
 * objects, and what they answer.
 */

const fleet = inject("upstreams").fleetUrls;
const names = Array.from({ length: 80 }, (_, i) => `status-many-${i}`);

beforeAll(async () => {
  for (const name of names) await ok(admin("/admin/v1/groups", { method: "POST", json: { name, deployments: [{ id: `${name}-d`, baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }] } }), 201);
  // The gateway's fleet is read afresh at most once a second: past that, every read has them all.
  await new Promise((r) => setTimeout(r, 1100));
}, 60_000);

/**
 * The most calls of the routing objects' `method` under way at once while `read` runs, and how
 * many it made. Each object's answer takes a while, as one across the network does: the calls
 * overlap. (An RPC's caller awaits the answer either way: the method may return it later.)
 */
async function callsAtOnce(method: "status" | "metrics", read: () => Promise<unknown>): Promise<{ most: number; calls: number }> {
  const real = ModelGroup.prototype[method] as (...args: unknown[]) => unknown;
  let under = 0;
  let most = 0;
  const slow = async function (this: ModelGroup, ...args: unknown[]) {
    most = Math.max(most, ++under);
    await new Promise((r) => setTimeout(r, 20));
    under--;
    return real.apply(this, args);
  };
  const spy = vi.spyOn(ModelGroup.prototype, method).mockImplementation(slow as never);
  try {
    await read();
    return { most, calls: spy.mock.calls.length };
  } finally {
    spy.mockRestore();
  }
}

// 32 groups at once, a sharded group's objects (two, in the test config) asked together.
const BOUND = 32 * 2;

describe("a read of the whole fleet of many groups", () => {
  it("GET /admin/v1/status asks a bounded number of groups' routing objects at once, not every group's together", async () => {
    const { most, calls } = await callsAtOnce("status", () => ok(admin("/admin/v1/status")));
    expect(calls).toBeGreaterThan(names.length);
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(BOUND);
  });

  it("GET /metrics asks a bounded number at once, and still has every group's series", async () => {
    let text = "";
    const { most, calls } = await callsAtOnce("metrics", async () => {
      const res = await gateway("/metrics", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } });
      text = await res.text();
      expect(res.status, text).toBe(200);
    });
    expect(calls).toBeGreaterThan(names.length);
    for (const name of names) expect(text).toContain(`kvgate_group_up{group="${name}"} 1`);
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(BOUND);
  });

  it("GET /v1/kvgate/status asks a bounded number at once, and lists the groups in the fleet's order", async () => {
    let body = { groups: [] as { group: string }[], unavailable: [] as string[] };
    const { most, calls } = await callsAtOnce("status", async () => {
      body = await ok(gateway("/v1/kvgate/status"));
    });
    expect(calls).toBeGreaterThan(names.length);
    expect(body.unavailable).toEqual([]);
    const listed = body.groups.map((g) => g.group);
    expect(listed.filter((g) => g.startsWith("status-many-"))).toEqual(names);
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(BOUND);
  });
});
