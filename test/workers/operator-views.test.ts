import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it } from "vitest";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import type { ResolvedGroup } from "../../src/config/load.ts";
import { groupShards, shardObjectName } from "../../src/sharding/partition.ts";
import type { GroupStatus } from "../../src/routing/protocol.ts";
import type { FleetStatus } from "../../src/fleet/admin-api.ts";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { chat, conversation, expectIdle, gateway, groupConfig } from "./gateway.ts";

/**
 * What an operator reads of the fleet — /metrics, /v1/kvgate/status, the model list — while the
 * fleet changes through another isolate (the admin API served elsewhere, a server's heartbeat):
 * this isolate serves none of the changed groups' models, so nothing on its request path tells it
 * of the change. And a routing object that does not answer, which the runtime cannot make happen
 * on purpose: a stand-in for the routing objects' binding whose calls to one object throw.
 */

const fleet = inject("upstreams").fleetUrls;
const METRICS = { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` };

/** The fleet's reads are bounded to one a second per isolate: wait one out. */
const pastTheBound = () => new Promise((r) => setTimeout(r, 1100));

async function metricsText(): Promise<string> {
  const res = await gateway("/metrics", { headers: METRICS });
  expect(res.status).toBe(200);
  return res.text();
}

describe("a group added through another isolate", () => {
  it("is in /metrics, /v1/kvgate/status and the model list within a second, though no request here named it", async () => {
    // This isolate has read its fleet (and scrapes keep it warm).
    expect(await metricsText()).toContain('kvgate_group_up{group="routing"} 1');
    const added = await env.FLEET.getByName(REGISTRY_NAME).command({ op: "add-group", group: { name: "added-elsewhere", shards: 2, deployments: [{ id: "far", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } });
    expect(added).toMatchObject({ ok: true });
    await pastTheBound();

    expect(await metricsText()).toContain('kvgate_group_up{group="added-elsewhere"} 1');
    const status = (await (await gateway("/v1/kvgate/status")).json()) as { groups: GroupStatus[] };
    expect(status.groups.find((g) => g.group === "added-elsewhere")?.backends.map((b) => b.id)).toEqual(["far"]);
    const models = (await (await gateway("/v1/models")).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toContain("added-elsewhere");
    expect((await gateway("/v1/models/added-elsewhere")).status).toBe(200);

    // Removed the same way: its series go, and no scrape asks its objects again.
    expect(await env.FLEET.getByName(REGISTRY_NAME).command({ op: "remove-group", group: "added-elsewhere" })).toMatchObject({ ok: true });
    await pastTheBound();
    expect(await metricsText()).not.toContain('group="added-elsewhere"');
  });
});

describe("a routing object that does not answer", () => {
  /** The real routing objects, but every call to the object named `down` throws (or, `hung`, never answers). */
  const objectsWithout = (down: string, hung = false): unknown => ({
    getByName: (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
      if (name === down) {
        const fail = hung
          ? () => new Promise<never>(() => {})
          : async () => {
              throw new Error("Durable Object is overloaded. Too many requests queued.");
            };
        return { status: fail, metrics: fail };
      }
      return env.MODEL_GROUP.getByName(name, options);
    },
  });

  /** `path` called with `key` through the `bindings` given in place of the env's: its answer, and `settled` once what it left running (a read it gave up on) is over. */
  function operatorCall(path: string, key: string, bindings: Record<string, unknown>): { answer: Promise<Response>; settled: Promise<void> } {
    const ctx = createExecutionContext();
    const answer = Promise.resolve(worker.fetch(new Request(`https://kvgate.test${path}`, { headers: { authorization: `Bearer ${key}` } }), { ...env, ...bindings } as Env, ctx));
    return { answer, settled: answer.then(() => waitOnExecutionContext(ctx)) };
  }

  async function asOperator(path: string, key: string, down: string, hung = false): Promise<Response> {
    const call = operatorCall(path, key, { MODEL_GROUP: objectsWithout(down, hung) });
    await call.settled;
    return call.answer;
  }

  /** The fleet registry, each read of its snapshot answered once `answers` settles (a registry busy seeding, or stuck). */
  const registryAnswering = (answers: () => Promise<unknown>): unknown => ({
    getByName: (name: string) => {
      const real = env.FLEET.getByName(name);
      return { snapshot: async () => (await answers(), real.snapshot()) };
    },
  });

  it("leaves the other groups in /v1/kvgate/status and names it unavailable, instead of a 500", async () => {
    const res = await asOperator("/v1/kvgate/status", env.KVGATE_MASTER_KEY, "routing");
    const text = await res.text();
    expect(res.status, text).toBe(200);
    const body = JSON.parse(text) as { groups: GroupStatus[]; unavailable: string[] };
    expect(body.unavailable).toEqual(["routing"]);
    expect(body.groups.map((g) => g.group)).not.toContain("routing");
    expect(body.groups.length).toBeGreaterThan(1);
  });

  it("that never answers holds no read of the whole fleet past its bound: the others come within a scrape's 10 s, it reported down", async () => {
    const started = Date.now();
    const [metrics, status, fleetStatus] = await Promise.all([
      asOperator("/metrics", env.KVGATE_ADMIN_KEY, "routing", true),
      asOperator("/v1/kvgate/status", env.KVGATE_MASTER_KEY, "routing", true),
      asOperator("/admin/v1/status", env.KVGATE_ADMIN_KEY, "routing", true),
    ]);
    const text = await metrics.text();
    expect(metrics.status, text).toBe(200);
    expect(text).toContain('kvgate_group_up{group="routing"} 0');
    expect(text).toMatch(/kvgate_group_up\{group="(?!routing")[^"]+"\} 1/);
    const body = (await status.json()) as { groups: GroupStatus[]; unavailable: string[] };
    expect(status.status).toBe(200);
    expect(body.unavailable).toEqual(["routing"]);
    expect(body.groups.length).toBeGreaterThan(1);
    const fleetBody = (await fleetStatus.json()) as FleetStatus;
    expect(fleetStatus.status).toBe(200);
    expect(fleetBody.groups.find((g) => g.name === "routing")?.routingRev).toBeNull();
    expect(fleetBody.groups.filter((g) => g.routingRev !== null).length).toBeGreaterThan(1);
    expect(Date.now() - started).toBeLessThan(10_000);
  }, 20_000);

  it("nor does a registry slow to answer: the scrape's 8 s count from its arrival, and it answers within 10 s, the others up", async () => {
    expect((await asOperator("/metrics", env.KVGATE_ADMIN_KEY, "none")).status).toBe(200); // the isolate holds its fleet
    await pastTheBound();
    const started = Date.now();
    // Its snapshot 3 s late, and one group's object never answering.
    const scrape = operatorCall("/metrics", env.KVGATE_ADMIN_KEY, { FLEET: registryAnswering(() => new Promise((r) => setTimeout(r, 3000))), MODEL_GROUP: objectsWithout("routing", true) });
    const res = await scrape.answer;
    const took = Date.now() - started;
    const text = await res.text();
    expect(res.status, text).toBe(200);
    expect(text).toContain('kvgate_group_up{group="routing"} 0');
    expect(text).toMatch(/kvgate_group_up\{group="(?!routing")[^"]+"\} 1/);
    expect(took).toBeLessThan(10_000);
    await scrape.settled;
  }, 20_000);

  it("nor does a registry that never answers: the fleet held answers, and the read, when it lands, updates it", async () => {
    expect((await asOperator("/metrics", env.KVGATE_ADMIN_KEY, "none")).status).toBe(200); // the isolate holds its fleet
    await pastTheBound();
    let answer = () => {};
    const answered = new Promise<void>((r) => (answer = r));
    const scrape = operatorCall("/metrics", env.KVGATE_ADMIN_KEY, { FLEET: registryAnswering(() => answered) });
    try {
      const res = await Promise.race([scrape.answer, new Promise<null>((r) => setTimeout(() => r(null), 10_000))]);
      expect(res, "no answer within a scrape's 10 s").not.toBeNull();
      const text = await (res as Response).text();
      expect(res?.status, text).toBe(200);
      expect(text).toContain('kvgate_group_up{group="routing"} 1');
      // Meanwhile a group is added (through another isolate): the read given up on sees it when it lands.
      expect(await env.FLEET.getByName(REGISTRY_NAME).command({ op: "add-group", group: { name: "added-while-stuck", deployments: [{ id: "far", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } })).toMatchObject({ ok: true });
    } finally {
      answer();
    }
    await scrape.settled;
    // Within a second of that read, no other: a registry that now fails shows what the late read brought.
    const unreachable = registryAnswering(async () => {
      throw new Error("Durable Object is overloaded. Too many requests queued.");
    });
    const after = operatorCall("/metrics", env.KVGATE_ADMIN_KEY, { FLEET: unreachable });
    await after.settled;
    expect(await (await after.answer).text()).toContain('kvgate_group_up{group="added-while-stuck"} 1');
    expect(await env.FLEET.getByName(REGISTRY_NAME).command({ op: "remove-group", group: "added-while-stuck" })).toMatchObject({ ok: true });
  }, 30_000);

  it("while a read given up on is still under way, starts no other: a scraped isolate piles no calls on a registry that does not answer (found by review)", async () => {
    expect((await asOperator("/metrics", env.KVGATE_ADMIN_KEY, "none")).status).toBe(200); // the isolate holds its fleet
    await pastTheBound();
    let answer = () => {};
    const answered = new Promise<void>((r) => (answer = r));
    let reads = 0;
    const stuck = registryAnswering(() => (reads++, answered));
    const scrapes: ReturnType<typeof operatorCall>[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const scrape = operatorCall("/metrics", env.KVGATE_ADMIN_KEY, { FLEET: stuck });
        scrapes.push(scrape);
        expect((await scrape.answer).status).toBe(200);
        await pastTheBound();
      }
      expect(reads).toBe(1);
    } finally {
      answer();
    }
    for (const s of scrapes) await s.settled;
  }, 30_000);

  it("in a sharded group, leaves the answering shards' series in /metrics, the group reported down", async () => {
    // Each shard's object holds its slice of the group, as the first requests to it leave it.
    const shards = groupShards(groupConfig("sharded"));
    await Promise.all(shards.objectNames.map((name, i) => env.MODEL_GROUP.getByName(name).install(shards.views[i] as ResolvedGroup)));
    const res = await asOperator("/metrics", env.KVGATE_ADMIN_KEY, shardObjectName("sharded", 1));
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).toContain('kvgate_group_up{group="sharded"} 0');
    // Shard 0's backends are still there; shard 1's are missing, as the gauge says.
    expect(text).toMatch(/kvgate_requests_in_flight\{group="sharded",backend="[^"]+"\}/);
    expect(text).toContain('kvgate_group_up{group="routing"} 1');
  });
});

describe("a deployment that keeps its id at a new address", () => {
  it("is one series per counter in /metrics, its counts the sum of both addresses', while the old one is still known", async () => {
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "moved", deployments: [{ id: "x", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } }), 201);
    const served = async () => {
      const res = await chat("moved", conversation("moraine"));
      expect(res.status).toBe(200);
      await res.text();
    };
    await served();
    // A server's pod restarted with a new address and the same name, as a heartbeat or a PATCH says.
    await ok(admin("/admin/v1/groups/moved/deployments/x", { method: "PATCH", json: { baseUrl: fleet[1] } }));
    await served();
    await expectIdle("moved");
    const text = await metricsText();
    expect(text.split("\n").filter((l) => l.startsWith('kvgate_requests_in_flight{group="moved",backend="x"}'))).toHaveLength(1);
    // Each sample a whole line: "} 2" alone would match "} 20" too.
    expect(text).toContain('\nkvgate_requests_total{group="moved",backend="x",outcome="ok"} 2\n');
  });

  it("keeps its let-go address's counts in its series while a request still runs on it after the group lost it: no counter falls before the series goes", async () => {
    const group = "moved-then-removed";
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, deployments: [{ id: "x", baseUrl: fleet[0], model: UPSTREAM_MODEL }] } }), 201);
    const served = async () => {
      const res = await chat(group, conversation("scree"));
      expect(res.status).toBe(200);
      await res.text();
    };
    await served();
    // Its pod restarted at another address; newer versions (an operator tuning it) push out the one that named the old address, which is let go.
    await ok(admin(`/admin/v1/groups/${group}/deployments/x`, { method: "PATCH", json: { baseUrl: fleet[1] } }));
    await served();
    for (const maxInFlight of [11, 12, 13, 14]) {
      await ok(admin(`/admin/v1/groups/${group}/deployments/x`, { method: "PATCH", json: { maxInFlight } }));
      await served();
    }
    await expectIdle(group);
    const ok6 = '\nkvgate_requests_total{group="moved-then-removed",backend="x",outcome="ok"} 6\n';
    expect(await metricsText()).toContain(ok6);
    // A stream of 20 s (unless cancelled) on it, then the group loses it (another server takes its place).
    const open = await chat(group, conversation("talus"), { stream: true, max_tokens: 400, kvgate_sim: { chunk_delay_ms: 50 } });
    expect(open.status).toBe(200);
    await ok(admin(`/admin/v1/groups/${group}/deployments`, { method: "POST", json: { id: "y", baseUrl: fleet[0], model: UPSTREAM_MODEL } }), 201);
    await ok(admin(`/admin/v1/groups/${group}/deployments/x`, { method: "DELETE" }));
    await pastTheBound();
    // Listed while the request runs (kvgate_requests_in_flight 1), its counters as they were.
    const during = await metricsText();
    expect(during).toContain('\nkvgate_requests_in_flight{group="moved-then-removed",backend="x"} 1\n');
    expect(during).toContain(ok6);
    await open.body?.cancel();
    await expectIdle(group);
    // Its request over, its series go, the let-go address's counts with them.
    expect(await metricsText()).not.toContain('group="moved-then-removed",backend="x"');
  });
});
