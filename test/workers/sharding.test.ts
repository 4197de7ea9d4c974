import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import type { GroupStatus } from "../../src/routing/protocol.ts";
import type { FleetStatus } from "../../src/fleet/admin-api.ts";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { ChatCompletionRequestSchema } from "../../src/openai/requests.ts";
import { chatFingerprint } from "../../src/prefix/fingerprint.ts";
import { groupShards, objectNamesOf, shardObjectName } from "../../src/sharding/partition.ts";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";
import { shardOrder } from "../../src/sharding/shard-order.ts";
import { testConfig, UPSTREAM_MODEL } from "../support/test-config.ts";
import type { IssuedKeyView } from "../../src/tenants/admin-api.ts";
import { admin, ok } from "./admin.ts";
import { chat, EVENTUALLY, expectIdle, gateway, type ChatMessage } from "./gateway.ts";

const SYSTEM = "You answer questions about the sea for a coastal survey team. ".repeat(40);

/** A conversation of an app: the app's system prompt, then its own questions and answers. */
function turnOf(topic: string, turns: number): ChatMessage[] {
  const messages: ChatMessage[] = [{ role: "system", content: SYSTEM }];
  for (let t = 0; t < turns; t++) {
    messages.push({ role: "user", content: `Question ${t} about ${topic}: how does it change over a year, and why?` });
    if (t < turns - 1) messages.push({ role: "assistant", content: `Answer ${t} about ${topic}.` });
  }
  return messages;
}

const shardStatus = (group: string): Promise<GroupStatus[]> => Promise.all(objectNamesOf(group, 2).map((n) => env.MODEL_GROUP.getByName(n).status()));

/** Requests the server of shard `shard` of sharded-spill has completed, as its routing object counts them. */
const completedOn = async (shard: number): Promise<number> => (await shardStatus("sharded-spill"))[shard]?.backends[0]?.completed ?? 0;

/**
 * Where a virtual key's request went, which its answer does not say (README: routing headers): the
 * server of `shard` counts one more completed, once its lease's release reached its object.
 */
async function expectCompletedOn(shard: number, before: number): Promise<void> {
  await vi.waitFor(async () => expect(await completedOn(shard)).toBe(before + 1), EVENTUALLY);
}

async function expectShardsIdle(group: string): Promise<void> {
  await vi.waitFor(async () => expect((await shardStatus(group)).flatMap((s) => s.backends).reduce((n, b) => n + b.inFlight, 0)).toBe(0), EVENTUALLY);
}

/**
 * sharded-spill with the server of one shard (`home`) backed up by a long prompt (`held`, the
 * master key's): `topics.home` are openings keyed to that shard, `topics.away` to the other.
 * `filler`: the long prompt's text, one the server has not cached yet.
 */
async function backedUpShard(filler = "the whole logbook, page by page. ") {
  const config = parseConfig(testConfig(inject("upstreams")));
  if (!config.ok) throw new Error(config.error);
  const group = config.config.groups.find((g) => g.name === "sharded-spill") as ResolvedGroup;
  const { weights, views } = groupShards(group);
  const serverOf = (shard: number) => views[shard]?.deployments[0]?.id;
  // The shard a new conversation is keyed to: by its first blocks, as the Worker keys a prompt
  // under no shared prefix (src/sharding/shard-key.ts), through the same hash.
  const shardOf = (messages: ChatMessage[]) => {
    const chain = chatFingerprint(ChatCompletionRequestSchema.parse({ model: "sharded-spill", messages }), { blockChars: group.blockChars, maxBlocks: group.maxPrefixBlocks });
    return shardOrder(chain[Math.min(4, chain.length) - 1] as number, weights)[0] as number;
  };
  const opening = (topic: string): ChatMessage[] => [{ role: "user", content: `${topic}: `.padEnd(320, `${topic} survey notes; `) }];
  const all = ["sandbars", "breakwaters", "lagoons", "skerries", "tombolos", "spits", "machair", "saltings"];
  const [long, ...homeTopics] = ((): string[] => {
    for (const a of all) {
      const same = all.filter((b) => b !== a && shardOf(opening(b)) === shardOf(opening(a)));
      if (same.length >= 2 && same.length < all.length - 1) return [a, ...same];
    }
    throw new Error("no three topics keyed to one shard and one to the other");
  })() as [string, ...string[]];
  const home = shardOf(opening(long));
  const topics = { home: homeTopics, away: all.filter((t) => shardOf(opening(t)) !== home) };
  // ~60 blocks to prefill at a block a second: a minute of queued work on the home shard's server.
  const held = chat("sharded-spill", [...opening(long), { role: "user", content: filler.repeat(110) }], { kvgate_sim: { first_byte_delay_ms: 1500 } });
  await vi.waitFor(async () => expect((await shardStatus("sharded-spill"))[home]?.backends[0]?.inFlight).toBe(1), EVENTUALLY);
  return { serverOf, opening, topics, home, away: 1 - home, held };
}

describe("a model group sharded over two routing objects", () => {
  it("routes each shard's servers in its own object, and every later turn of a conversation to the server that holds it", async () => {
    const topics = ["kelp", "tides", "dunes", "reefs", "gulls", "fjords", "deltas", "atolls", "brine", "shoals", "estuaries", "currents"];
    const served = new Map<string, string[]>();
    const reasons = new Map<string, string[]>();
    for (let turns = 1; turns <= 3; turns++) {
      for (const topic of topics) {
        const res = await chat("sharded", turnOf(topic, turns));
        expect(res.status).toBe(200);
        await res.text();
        served.set(topic, [...(served.get(topic) ?? []), res.headers.get("x-kvgate-backend") ?? ""]);
        reasons.set(topic, [...(reasons.get(topic) ?? []), res.headers.get("x-kvgate-reason") ?? ""]);
      }
    }
    const [first, second] = await shardStatus("sharded");
    const own = (s: GroupStatus | undefined) => (s?.backends ?? []).map((b) => b.id).sort();
    // Each object holds its slice of the group's servers, and only it.
    expect(own(first).length).toBe(2);
    expect([...own(first), ...own(second)].sort()).toEqual(["sim-0", "sim-1", "sim-2", "sim-3"]);
    expect(first?.group).toBe("sharded");
    expect(second?.group).toBe("sharded");
    // The first two prompts of a new system prompt are keyed by its first blocks (src/sharding/shard-key.ts); every
    // conversation after them stays on one server from its first turn, the first two from their second.
    topics.forEach((topic, i) => {
      const backends = served.get(topic) as string[];
      const from = i < 2 ? 1 : 0;
      expect(new Set(backends.slice(from)).size, topic).toBe(1);
      expect((reasons.get(topic) as string[]).slice(from + 1), topic).toEqual(Array(2 - from).fill("prefix-hit"));
    });
    // Conversations spread over both shards.
    const used = new Set([...served.values()].map((b) => b.at(-1)));
    expect(own(first).some((id) => used.has(id))).toBe(true);
    expect(own(second).some((id) => used.has(id))).toBe(true);
    await expectShardsIdle("sharded");
  });

  it("shows the group as one in /v1/kvgate/status and /metrics", async () => {
    const res = await chat("sharded", turnOf("plankton", 1));
    await res.text();
    await expectShardsIdle("sharded");
    const body = (await (await gateway("/v1/kvgate/status")).json()) as { groups: GroupStatus[] };
    const sharded = body.groups.filter((g) => g.group === "sharded");
    expect(sharded.length).toBe(1);
    expect(sharded[0]?.backends.map((b) => b.id).sort()).toEqual(["sim-0", "sim-1", "sim-2", "sim-3"]);
    const parts = await shardStatus("sharded");
    expect(sharded[0]?.calls.route).toBe(parts.reduce((n, p) => n + p.calls.route, 0));
    const metrics = await (await gateway("/metrics", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } })).text();
    // Each backend's counts are its shard's object's, named so: one series each.
    for (const [i, b] of (parts.map((p) => p.backends.map((x) => x.id)) as string[][]).entries()) {
      for (const id of b) expect(metrics).toContain(`kvgate_requests_total{group="sharded",backend="${id}",shard="${i}",outcome="ok"}`);
    }
    expect(parts.flatMap((p) => p.backends.map((x) => x.id)).sort()).toEqual(["sim-0", "sim-1", "sim-2", "sim-3"]);
    expect(metrics).not.toContain("\u001f");
  });

  it("names the object of every counter's and histogram's series by its shard, the group's own shard=\"0\" too, and an unsharded group's by none", async () => {
    // Conversations on both shards' servers (a conversation's first prompt is keyed by its system prompt's blocks: a few topics reach both).
    for (const topic of ["kelp", "brine", "shoal", "reef", "spume", "wrack"]) await (await chat("sharded", [{ role: "system", content: `${topic}: `.repeat(200) }, ...turnOf(topic, 1).slice(1)])).text();
    await (await chat("one-slot", turnOf("kelp", 1))).text();
    await expectShardsIdle("sharded");
    await expectIdle("one-slot");
    const text = await (await gateway("/metrics", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } })).text();
    /** The sample lines of the counters and histograms of `group`. */
    const counted = (group: string) => {
      let counts = false;
      return text.split("\n").filter((line) => {
        if (line.startsWith("# TYPE ")) counts = / (counter|histogram)$/.test(line);
        return counts && line.includes(`{group="${group}",`);
      });
    };
    const shardOf = (line: string) => /[{,]shard="(\d+)"[,}]/.exec(line)?.[1];
    // Sharded: each series says which object counted it, so none reads as the group's whole (as it did before the shard label).
    const sharded = counted("sharded");
    expect(sharded.filter((l) => shardOf(l) === undefined)).toEqual([]);
    expect(new Set(sharded.map(shardOf))).toEqual(new Set(["0", "1"]));
    expect(new Set(sharded.filter((l) => l.startsWith("kvgate_requests_total{")).map(shardOf))).toEqual(new Set(["0", "1"]));
    // One object: its series as they always were, with no shard label.
    const single = counted("one-slot");
    expect(single.length).toBeGreaterThan(0);
    expect(single.filter((l) => shardOf(l) !== undefined)).toEqual([]);
  });

  it("fails a request over to the next shard when its own has no server left to try", async () => {
    const topics = ["squid", "krill", "eels", "rays", "crabs", "clams", "sponges", "urchins", "corals", "limpets", "whelks", "mussels"];
    for (const topic of topics) {
      const res = await chat("sharded-failover", turnOf(topic, 1));
      expect(res.status, topic).toBe(200);
      await res.text();
      expect(res.headers.get("x-kvgate-backend")).toBe("healthy");
    }
    const [first, second] = await shardStatus("sharded-failover");
    const dead = [...(first?.backends ?? []), ...(second?.backends ?? [])].find((b) => b.id === "dead");
    // Requests keyed to the dead server's shard were tried there, then served by the other shard.
    expect(dead?.failed).toBeGreaterThan(0);
    await expectShardsIdle("sharded-failover");
  });

  it("passes a prompt keyed to a shard backed up with a long prompt to the other shard, and keeps its conversation there", async () => {
    const { serverOf, opening, topics, home, away, held } = await backedUpShard();
    const [spilled, stays] = topics.home as [string, string];
    // Keyed to the same shard, a short prompt would wait behind that minute, and a few seconds on the other.
    const first = await chat("sharded-spill", opening(spilled));
    expect(first.status).toBe(200);
    await first.text();
    expect(first.headers.get("x-kvgate-backend")).toBe(serverOf(away));
    const heldRes = await held;
    expect(heldRes.headers.get("x-kvgate-backend")).toBe(serverOf(home));
    await heldRes.text();
    // With the home shard's queue gone, a prompt keyed there is served there;
    const other = await chat("sharded-spill", opening(stays));
    await other.text();
    expect(other.headers.get("x-kvgate-backend")).toBe(serverOf(home));
    // and the conversation that moved goes on where its history now is.
    const next = await chat("sharded-spill", [...opening(spilled), { role: "assistant", content: "Noted." }, { role: "user", content: "And in winter?" }]);
    await next.text();
    expect([next.headers.get("x-kvgate-backend"), next.headers.get("x-kvgate-reason")]).toEqual([serverOf(away), "prefix-hit"]);
    await expectShardsIdle("sharded-spill");
  });

  it("serves a key's prompt on its own shard, backed up, when the other shard it would spill to has the key at its limit there", async () => {
    const { key, id } = await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: { max_parallel: 1 } }), 201);
    const asKey = { headers: { authorization: `Bearer ${key}` } };
    const { opening, topics, home, away, held } = await backedUpShard("the tide tables, hour by hour. ");
    // The key's one request in flight on the other shard, a stream that lasts 20 s unless cancelled.
    const open = await chat("sharded-spill", opening(topics.away[0] as string), { stream: true, max_tokens: 400, kvgate_sim: { chunk_delay_ms: 50 } }, asKey);
    expect(open.status).toBe(200);
    // On the other shard's server: the one request in flight there.
    await vi.waitFor(async () => expect((await shardStatus("sharded-spill"))[away]?.backends[0]?.inFlight).toBe(1), EVENTUALLY);
    // Keyed to the backed-up shard, where the key has nothing in flight: it is passed on, and the
    // other shard has the key at its max_parallel; the request waits on its own shard instead of a 429.
    // (A topic of its own: the test before moved one conversation keyed there to the other shard.)
    expect(topics.home.length).toBeGreaterThanOrEqual(3);
    const before = await completedOn(home);
    const res = await chat("sharded-spill", opening(topics.home[2] as string), {}, asKey);
    expect(res.status, await res.clone().text()).toBe(200);
    await res.text();
    // Served by its own shard's server (the long prompt held there is still in prefill).
    await expectCompletedOn(home, before);
    // The other shard's refusal was no 429 of the key's: its limit hits count none.
    const metrics = await (await gateway("/metrics", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } })).text();
    // One request on each shard, each counted by its object.
    // Each sample a whole line: "} 1" alone would match "} 10" too.
    expect(metrics).toContain(`\nkvgate_key_requests_total{group="sharded-spill",key="${id}",shard="0"} 1\n`);
    expect(metrics).toContain(`\nkvgate_key_requests_total{group="sharded-spill",key="${id}",shard="1"} 1\n`);
    expect(metrics).not.toContain(`kvgate_key_limit_hits_total{group="sharded-spill",key="${id}"`);
    await open.body?.cancel();
    await (await held).text();
    await expectShardsIdle("sharded-spill");
  });

  it("refuses a key past its budget on the shard a prompt was passed on to: a budget is the key's on every shard", async () => {
    const { key } = await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: { budget_tokens: 50, budget_period: "total" } }), 201);
    const asKey = { headers: { authorization: `Bearer ${key}` } };
    const { serverOf, opening, topics, away, held } = await backedUpShard("the harbour charts, berth by berth. ");
    // The key spends its budget on the other shard: that shard knows it at once, its own the next time it hears from the tenants object.
    const before = await completedOn(away);
    const spent = await chat("sharded-spill", opening(topics.away[1] as string), { max_tokens: 60 }, asKey);
    expect(spent.status).toBe(200);
    await spent.text();
    await expectCompletedOn(away, before);
    // A request in flight on the other shard too, so that the shards' loads do not order the next prompt there first.
    const busy = await chat("sharded-spill", opening(topics.away[0] as string), { stream: true, max_tokens: 400, kvgate_sim: { chunk_delay_ms: 50 } });
    expect(busy.headers.get("x-kvgate-backend")).toBe(serverOf(away));
    // Keyed to the backed-up shard, passed on to the other, which has the key past its budget: refused, not served back home.
    const res = await chat("sharded-spill", opening(topics.home[2] as string), {}, asKey);
    expect(res.status, await res.clone().text()).toBe(429);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("insufficient_quota");
    await busy.body?.cancel();
    await (await held).text();
    await expectShardsIdle("sharded-spill");
  });

  it("gets its slices from the fleet registry, which retires the objects of shards a group gives up", async () => {
    const fleet = inject("upstreams").fleetUrls;
    const deployments = fleet.map((baseUrl, i) => ({ id: `r${i}`, baseUrl, model: UPSTREAM_MODEL }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "sharded-live", shards: 2, deployments } }), 201);
    const slices = async (n: number) => (await Promise.all(objectNamesOf("sharded-live", n).map((o) => env.MODEL_GROUP.getByName(o).status()))).map((s) => s.backends.filter((b) => b.takesRequests).map((b) => b.id).sort());
    // Pushed at once, before any request: each object holds its slice.
    const [a, b] = await slices(2);
    expect(a?.length).toBe(2);
    expect([...(a ?? []), ...(b ?? [])].sort()).toEqual(["r0", "r1", "r2", "r3"]);
    for (let i = 0; i < 6; i++) {
      const res = await chat("sharded-live", turnOf(`walrus ${i}`, 1));
      expect(res.status).toBe(200);
      await res.text();
    }
    // One shard again: the group's own object takes every server, the other is retired.
    await ok(admin("/admin/v1/groups/sharded-live", { method: "PATCH", json: { shards: 1 } }));
    const [all, retired] = await slices(2);
    expect(all).toEqual(["r0", "r1", "r2", "r3"]);
    expect(retired).toEqual([]);
    const after = await chat("sharded-live", turnOf("walrus 0", 2));
    expect(after.status).toBe(200);
    await after.text();
    await expectShardsIdle("sharded-live");
  });

  it("counts a drained server's requests still in flight on a shard the group gave up: not drained until they end", async () => {
    const fleet = inject("upstreams").fleetUrls;
    const deployments = fleet.map((baseUrl, i) => ({ id: `g${i}`, baseUrl, model: UPSTREAM_MODEL }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "sharded-shrink", shards: 2, deployments } }), 201);
    const [, second] = await Promise.all(objectNamesOf("sharded-shrink", 2).map((o) => env.MODEL_GROUP.getByName(o).status()));
    const onSecond = new Set(second?.backends.map((b) => b.id));
    // A stream of 20 s (unless cancelled) on a server of the second shard.
    let open: Response | null = null;
    for (let i = 0; i < 16 && !open; i++) {
      const res = await chat("sharded-shrink", turnOf(`seal ${i}`, 1), { stream: true, max_tokens: 400, kvgate_sim: { chunk_delay_ms: 50 } });
      expect(res.status).toBe(200);
      if (onSecond.has(res.headers.get("x-kvgate-backend") ?? "")) open = res;
      else await res.body?.cancel();
    }
    if (!open) throw new Error("no conversation went to the second shard");
    const id = open.headers.get("x-kvgate-backend") as string;
    // One shard again: the second shard's object is retired, its stream still running through it.
    await ok(admin("/admin/v1/groups/sharded-shrink", { method: "PATCH", json: { shards: 1 } }));
    await ok(admin(`/admin/v1/groups/sharded-shrink/deployments/${id}/drain`, { method: "POST" }));
    const row = await ok<{ inFlight: number | null; drained: boolean }>(admin(`/admin/v1/groups/sharded-shrink/deployments/${id}`));
    expect([row.inFlight, row.drained]).toEqual([1, false]);
    await open.body?.cancel();
    await vi.waitFor(async () => expect((await ok<{ drained: boolean }>(admin(`/admin/v1/groups/sharded-shrink/deployments/${id}`))).drained).toBe(true), EVENTUALLY);
  });
  it("adds up in /v1/kvgate/status what a server did in the shard it left and in the one it moved to", async () => {
    const fleet = inject("upstreams").fleetUrls;
    const deployments = fleet.map((baseUrl, i) => ({ id: `m${i}`, baseUrl, model: UPSTREAM_MODEL }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "sharded-moved", shards: 2, deployments } }), 201);
    const objects = () => Promise.all(objectNamesOf("sharded-moved", 2).map((o) => env.MODEL_GROUP.getByName(o).status()));
    const onSecond = new Set((await objects())[1]?.backends.map((b) => b.id));
    // A request served by a server of the second shard, and one more of its conversation still running there (20 s, unless cancelled).
    let topic: string | null = null;
    let served = "";
    for (let i = 0; i < 16 && topic === null; i++) {
      const res = await chat("sharded-moved", turnOf(`tern ${i}`, 1));
      await res.text();
      served = res.headers.get("x-kvgate-backend") ?? "";
      if (onSecond.has(served)) topic = `tern ${i}`;
    }
    if (topic === null) throw new Error("no conversation went to the second shard");
    await vi.waitFor(async () => expect((await objects())[1]?.backends.find((b) => b.id === served)?.completed).toBe(1), EVENTUALLY);
    const open = await chat("sharded-moved", turnOf(topic, 2), { stream: true, max_tokens: 400, kvgate_sim: { chunk_delay_ms: 50 } });
    // One shard again: the server moves to the group's own object, and the one it left is asked while its stream runs.
    await ok(admin("/admin/v1/groups/sharded-moved", { method: "PATCH", json: { shards: 1 } }));
    const listed = (await objects()).flatMap((o) => o.backends.filter((b) => b.id === served));
    expect(listed.map((b) => b.takesRequests)).toEqual([true, false]);
    const body = await ok<{ groups: GroupStatus[] }>(gateway("/v1/kvgate/status"));
    const shown = body.groups.find((g) => g.group === "sharded-moved")?.backends.find((b) => b.id === served);
    expect(shown?.completed).toBe(listed.reduce((n, b) => n + b.completed, 0));
    expect(shown?.completed).toBeGreaterThanOrEqual(1);
    await open.body?.cancel();
    await expectShardsIdle("sharded-moved");
  });
});

describe("the object of a shard a group gave up", () => {
  const group = "sharded-given-up";
  const retired = shardObjectName(group, 1);
  const METRICS = { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` };

  /** The real routing objects, but every call a Worker makes to the given-up shard's object throws (an outage, an overloaded object). */
  const withoutRetired: unknown = {
    getByName: (name: string, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
      if (name !== retired) return env.MODEL_GROUP.getByName(name, options);
      const fail = async () => {
        throw new Error("Durable Object is overloaded. Too many requests queued.");
      };
      return { status: fail, metrics: fail };
    },
  };
  /** `path` read through the gateway Worker, that object failing (`down`) or not. */
  async function read(path: string, key: string, down: boolean): Promise<Response> {
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request(`https://kvgate.test${path}`, { headers: { authorization: `Bearer ${key}` } }), (down ? { ...env, MODEL_GROUP: withoutRetired } : env) as Env, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  }
  /** The group's counter and histogram samples in a /metrics text, by line. */
  const countersOf = (text: string) =>
    new Map(
      text
        .split("\n")
        .filter((l) => l.includes(`group="${group}"`) && /^kvgate_\w+(_total|_bucket|_count|_sum)\{/.test(l))
        .map((l) => [l.slice(0, l.lastIndexOf(" ")), Number(l.slice(l.lastIndexOf(" ") + 1))] as const),
    );
  const scrape = async (down: boolean) => {
    const res = await read("/metrics", env.KVGATE_ADMIN_KEY, down);
    expect(res.status).toBe(200);
    return res.text();
  };
  const statusOf = async (down: boolean) => ok<{ groups: GroupStatus[]; unavailable: string[]; inFlightUnknown: string[] }>(read("/v1/kvgate/status", env.KVGATE_MASTER_KEY, down));
  const rowOf = async (id: string, down: boolean) => ok<{ inFlight: number | null; drained: boolean }>(read(`/admin/v1/groups/${group}/deployments/${id}`, env.KVGATE_ADMIN_KEY, down));
  /** The group's in flight as GET /admin/v1/status sums it (what the dashboard's summary and `npx kvgate status` show). */
  const fleetInFlight = async (down: boolean) => (await ok<FleetStatus>(read("/admin/v1/status", env.KVGATE_ADMIN_KEY, down))).groups.find((g) => g.name === group)?.inFlight;

  it("is asked no more once its requests ended: its failure then leaves the group whole, and no counter falls, nor once it is a shard again", async () => {
    const fleet = inject("upstreams").fleetUrls;
    const deployments = fleet.map((baseUrl, i) => ({ id: `u${i}`, baseUrl, model: UPSTREAM_MODEL }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, shards: 2, deployments } }), 201);
    const [, second] = await Promise.all(objectNamesOf(group, 2).map((o) => env.MODEL_GROUP.getByName(o).status()));
    const onSecond = new Set(second?.backends.map((b) => b.id));
    // Requests served by both shards, then a stream of 20 s (unless cancelled) on a server of the second.
    for (let i = 0; i < 8; i++) {
      const res = await chat(group, turnOf(`heron ${i}`, 1));
      expect(res.status).toBe(200);
      await res.text();
    }
    let open: Response | null = null;
    for (let i = 0; i < 16 && !open; i++) {
      const res = await chat(group, turnOf(`otter ${i}`, 1), { stream: true, max_tokens: 400, kvgate_sim: { chunk_delay_ms: 50 } });
      expect(res.status).toBe(200);
      if (onSecond.has(res.headers.get("x-kvgate-backend") ?? "")) open = res;
      else await res.body?.cancel();
    }
    if (!open) throw new Error("no conversation went to the second shard");
    const id = open.headers.get("x-kvgate-backend") as string;
    const before = countersOf(await scrape(false));
    expect([...before.keys()].some((k) => k.includes(`backend="${id}"`))).toBe(true);

    await ok(admin(`/admin/v1/groups/${group}`, { method: "PATCH", json: { shards: 1 } }));
    await ok(admin(`/admin/v1/groups/${group}/deployments/${id}/drain`, { method: "POST" }));
    await new Promise((r) => setTimeout(r, 1_100)); // the fleet's reads are bounded to one a second per isolate
    // While it holds the stream and does not answer, the group is up and shown; what it holds is unknown, and said so.
    const during = await scrape(true);
    expect(during).toContain(`kvgate_group_up{group="${group}"} 1`);
    // The group's own object's series come; the given-up one's are missing from this scrape, and none fell.
    const shown = countersOf(during);
    expect([[...shown.keys()].some((k) => !k.includes('shard="1"')), [...shown.keys()].some((k) => k.includes('shard="1"'))]).toEqual([true, false]);
    expect([...before].filter(([k, v]) => (shown.get(k) ?? v) < v)).toEqual([]);
    const status = await statusOf(true);
    expect([status.unavailable.includes(group), status.inFlightUnknown.includes(group)]).toEqual([false, true]);
    expect(status.groups.find((g) => g.group === group)?.backends.length).toBe(4);
    expect(await rowOf(id, true)).toMatchObject({ inFlight: null, drained: false });
    expect(await rowOf(id, false)).toMatchObject({ inFlight: 1, drained: false });
    // The group's sum says so too: unknown, not 0 while a stream runs.
    expect(await fleetInFlight(true)).toBeNull();
    expect(await fleetInFlight(false)).toBeGreaterThanOrEqual(1);

    await open.body?.cancel();
    // Once it has nothing in flight its counts are carried by the group's own object, and it is asked no more.
    await vi.waitFor(async () => expect(await rowOf(id, true)).toMatchObject({ inFlight: 0, drained: true }), { timeout: 20_000, interval: 200 });
    expect(await fleetInFlight(true)).toEqual(expect.any(Number));
    const after = await scrape(true);
    expect(after).toContain(`kvgate_group_up{group="${group}"} 1`);
    const counted = countersOf(after);
    expect([...before].filter(([k, v]) => (counted.get(k) ?? -1) < v)).toEqual([]);
    const whole = await statusOf(true);
    expect([whole.groups.find((g) => g.group === group)?.backends.length, whole.inFlightUnknown]).toEqual([4, []]);
    // And read without any failure: the same counts, none twice.
    expect(countersOf(await scrape(false))).toEqual(counted);

    // Two shards again, the drained server back: the object counts on from where it was, past the copy it handed over.
    await ok(admin(`/admin/v1/groups/${group}`, { method: "PATCH", json: { shards: 2 } }));
    await ok(admin(`/admin/v1/groups/${group}/deployments/${id}/enable`, { method: "POST" }));
    await new Promise((r) => setTimeout(r, 1_100)); // the fleet's reads, once a second per isolate
    let servedThere = 0;
    for (let i = 0; i < 32 && servedThere < 2; i++) {
      const res = await chat(group, turnOf(`puffin ${i}`, 1));
      expect(res.status).toBe(200);
      if (onSecond.has(res.headers.get("x-kvgate-backend") ?? "")) servedThere++;
      await res.text();
    }
    expect(servedThere).toBe(2);
    await new Promise((r) => setTimeout(r, 1_100));
    const again = countersOf(await scrape(false));
    expect([...again].some(([k, v]) => k.includes('shard="1"') && v > (counted.get(k) ?? 0))).toBe(true);
    // A scrape it does not answer: one of the group's shards, it is reported down and its series are missing, not set back to the copy.
    const unanswered = await scrape(true);
    expect(unanswered).toContain(`kvgate_group_up{group="${group}"} 0`);
    const left = countersOf(unanswered);
    expect([...left.keys()].filter((k) => k.includes('shard="1"'))).toEqual([]);
    expect([...again].filter(([k, v]) => (left.get(k) ?? v) < v)).toEqual([]);
  }, 40_000);

  it("starts its servers afresh once it is a shard again: none keeps the prefix set it had before", async () => {
    const name = "sharded-again";
    const second = env.MODEL_GROUP.getByName(shardObjectName(name, 1));
    const deployments = inject("upstreams").fleetUrls.map((baseUrl, i) => ({ id: `u${i}`, baseUrl, model: UPSTREAM_MODEL }));
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name, shards: 2, deployments } }), 201);
    const learned = async () => (await second.status()).backends.reduce((n, b) => n + b.prefixBlocks, 0);
    for (let i = 0; i < 16 && (await learned()) === 0; i++) {
      const res = await chat(name, turnOf(`wren ${i}`, 1));
      expect(res.status).toBe(200);
      await res.text();
    }
    expect(await learned()).toBeGreaterThan(0);
    // One shard, then two again within the minute the given-up object keeps its versions: the same slice, the same version.
    await ok(admin(`/admin/v1/groups/${name}`, { method: "PATCH", json: { shards: 1 } }));
    await ok(admin(`/admin/v1/groups/${name}`, { method: "PATCH", json: { shards: 2 } }));
    const back = await second.status();
    // The servers that take requests start afresh; a server's old state is listed beside them only while a lease of it still runs.
    const taking = back.backends.filter((b) => b.takesRequests);
    expect(taking.length).toBeGreaterThan(0);
    expect(taking.map((b) => [b.id, b.prefixBlocks, b.breaker.state])).toEqual(taking.map((b) => [b.id, 0, "closed"]));
    for (const old of back.backends.filter((b) => !b.takesRequests)) expect({ id: old.id, inFlight: old.inFlight > 0 }).toEqual({ id: old.id, inFlight: true });
  });
});
