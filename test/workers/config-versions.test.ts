import { createExecutionContext, evictDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import type { ModelGroupConfig } from "../../src/config/schema.ts";
import type { LimitRefusal, RouteDecision, RouteRefusal } from "../../src/routing/protocol.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { holdLease, route, type GroupRefusal } from "../../workers/gateway/route-client.ts";
import { EVENTUALLY, expectIdle, firstRouteCall, groupConfig, routeCall, status } from "./gateway.ts";

/**
 * While a deploy that changes a group's deployments propagates, Workers of the old and the new
 * config call the same Durable Object (issue 10 §3). Each must get a backend of its own config,
 * and what it reports (exclusions, a failure) must land on the server it meant.
 */

const fleet = inject("upstreams").fleetUrls;
const sim = (i: number) => ({ id: `sim-${i}`, baseUrl: fleet[i] as string, model: UPSTREAM_MODEL });

/** The group as another deploy resolves it: the same name and settings, other deployments. */
function redeployed(of: ResolvedGroup, deployments: ReturnType<typeof sim>[]): ResolvedGroup {
  const { version: _v, rev: _r, deployments: _d, ...settings } = of;
  const parsed = parseConfig({ modelGroups: [{ ...(settings as Omit<ModelGroupConfig, "deployments">), deployments }] });
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.config.groups[0] as ResolvedGroup;
}

function decided<D extends RouteDecision>(d: D | GroupRefusal | LimitRefusal): D {
  if ("refused" in d) throw new Error(`refused: ${d.refused}`);
  return d;
}

describe("Workers of two configs routing through one object", () => {
  // The object's own deploy had sim-0..2; the next one drops sim-1, adds sim-3 and reorders.
  const old = groupConfig("skew");
  // The next is the fleet registry's later revision: the newest, whichever the object saw first.
  const next = { ...redeployed(old, [sim(2), sim(3), sim(0)]), rev: old.rev + 1 };

  it("each gets a backend of its own config that the newest config still names", async () => {
    expect(next.version).not.toBe(old.version);
    const ctx = createExecutionContext();
    const seen = { old: new Set<string>(), next: new Set<string>() };
    for (let i = 0; i < 12; i++) {
      const [name, g] = i % 2 === 0 ? (["old", old] as const) : (["next", next] as const);
      const d = decided(await route(env, ctx, g, { chain: [i], blocks: 1 }, [], g.name));
      expect(g.deployments.map((x) => x.id)).toContain(d.backendId);
      seen[name].add(d.backendId);
      holdLease(d, g, env, ctx, 10).settle("ok");
    }
    // Round-robin in each config's own order; sim-1, which the newest config dropped, takes nothing new.
    expect([...seen.old].sort()).toEqual(["sim-0", "sim-2"]);
    expect([...seen.next].sort()).toEqual(["sim-0", "sim-2", "sim-3"]);
    await waitOnExecutionContext(ctx);
    await expectIdle("skew");
  });

  it("exclusions and failures land on the backend they name", async () => {
    const ctx = createExecutionContext();
    // The new config's sim-3 is the one left when its two others already failed; it fails twice.
    for (let i = 0; i < 2; i++) {
      const d = decided(await route(env, ctx, next, { chain: [], blocks: 0 }, ["sim-2", "sim-0"], next.name));
      expect(d.backendId).toBe("sim-3");
      holdLease(d, next, env, ctx, 10).settle("upstream-error");
    }
    await waitOnExecutionContext(ctx);
    await vi.waitFor(async () => {
      const breakers = Object.fromEntries((await status("skew")).backends.map((b) => [b.id, b.breaker.state]));
      expect(breakers).toEqual({ "sim-0": "closed", "sim-1": "closed", "sim-2": "closed", "sim-3": "open" });
    }, EVENTUALLY);
    // The old config never names sim-3, and routes over what it shares with the newest.
    const d = decided(await route(env, ctx, old, { chain: [], blocks: 0 }, ["sim-0"], old.name));
    expect(d.backendId).toBe("sim-2");
    holdLease(d, old, env, ctx, 10).settle("ok");
    await waitOnExecutionContext(ctx);
    await expectIdle("skew");
  });
});

describe("an object learns a version from the call that brings it", () => {
  it("refuses a version it does not know until its group comes along, and keeps it across an eviction", async () => {
    // A group no config of this test run names: the object needs none of its own.
    const g = redeployed(groupConfig("skew"), [sim(0), sim(1)]);
    const name = "versions-handshake";
    const group = { ...g, name };
    const stub = env.MODEL_GROUP.getByName(name);
    expect(await stub.route(routeCall(group, [1]))).toEqual({ refused: "unknown-version", rev: 0 });
    const first = decided((await stub.route(firstRouteCall(group, [1]))) as RouteDecision | RouteRefusal);
    expect(["sim-0", "sim-1"]).toContain(first.backendId);
    await evictDurableObject(stub);
    const after = await status(name);
    expect(after.versions).toEqual([group.version]);
    expect(after.backends.map((b) => b.id)).toEqual(["sim-0", "sim-1"]);
    const second = await stub.route(routeCall(group, [2], { released: [{ lease: first.lease, outcome: "ok" }] }));
    expect("backendId" in second).toBe(true);
  });
});
