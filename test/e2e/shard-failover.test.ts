import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { closedPort } from "../support/closed-port.ts";
import { partition } from "../../src/sharding/partition.ts";
import { adminCall } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A model group sharded over two routing objects, one of whose shards' servers all misbehave:
 * through the bundled gateway on a real socket, with the hostile upstream as the fleet. A prompt
 * keyed to the failing shard must still be answered by the other shard's healthy server, and a
 * server whose 429 asked to be spared must be spared by every shard's prompts, not only by those
 * of a shard that has another server to send them to.
 */

const ADMIN_KEY = `sk-admin-${randomBytes(16).toString("hex")}`;
let upstream: HostileUpstream;
let gw: TestGateway;

const hostile = (behaviour: string, id: string) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b" });
/** Two deployments over two shards: partition gives each shard one. */
const pair = (name: string, failing: ReturnType<typeof hostile>) => ({ name, shards: 2, deployments: [failing, hostile("ok", "healthy")] });

/** Six deployments over two shards: those of gpu-0's shard fail (rate-limit, or crash), the others answer. */
const SIX = ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"];
const SIX_SHARDS = partition(SIX, 2);
/** Nine over three shards: gpu-0's shard all dead behind their proxies, one server of another dead so too, the third shard healthy. */
const NINE = Array.from({ length: 9 }, (_, i) => `gpu-${i}`);
const NINE_SHARDS = partition(NINE, 3);
const NINE_DEAD = NINE.filter((_, i) => NINE_SHARDS[i] === NINE_SHARDS[0] || i === NINE_SHARDS.findIndex((s) => s !== NINE_SHARDS[0]));

beforeAll(async () => {
  upstream = await startHostileUpstream();
  const dead = `http://127.0.0.1:${await closedPort()}`;
  gw = await startTestGateway(
    {
      modelGroups: [
        pair("shard-rests", hostile("rate-limited:30", "busy")),
        pair("shard-fails", hostile("status:500", "failing")),
        pair("shard-loads", hostile("loading", "loading")),
        pair("shard-refuses", { id: "dead", baseUrl: dead, model: "hostile-7b" }),
        pair("shard-drained", hostile("crash-on", "other")),
        { name: "shard-streams", shards: 2, deployments: [hostile("status:500", "failing"), hostile("endless-stream", "streaming")] },
        { name: "shard-all-crash", shards: 2, deployments: SIX.map((id, i) => (SIX_SHARDS[i] === SIX_SHARDS[0] ? hostile("crash-on:harbour", id) : hostile("ok", id))) },
        { name: "shard-crash-on-body", shards: 2, deployments: [hostile("crash-on", "a"), hostile("crash-on", "b")] },
        // Breakers that never open here: every prompt meets the dead servers, as the first ones after they died do.
        { name: "shard-proxied-dead", shards: 3, strategy: "least-loaded", breaker: { consecutiveFailures: 10_000, minRequests: 10_000 }, deployments: NINE.map((id) => (NINE_DEAD.includes(id) ? hostile("status:502", id) : hostile("ok", id))) },
        { name: "shard-all-rest", shards: 2, deployments: SIX.map((id, i) => (SIX_SHARDS[i] === SIX_SHARDS[0] ? hostile("rate-limited:30", id) : hostile("ok", id))) },
      ],
    },
    { KVGATE_ADMIN_KEY: ADMIN_KEY },
  );
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

function chat(model: string, content: string): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: content.padEnd(400, ` ${content};`) }], max_tokens: 4 }),
  });
}

/** `n` distinct prompts, one at a time (about half keyed to each shard): each answer's status, backend and attempts. */
async function prompts(model: string, n: number, tag = model): Promise<[number, string | null, string | null][]> {
  const answers: [number, string | null, string | null][] = [];
  for (let i = 0; i < n; i++) {
    const res = await chat(model, `${tag} question ${i} about the harbour`);
    answers.push([res.status, res.headers.get("x-kvgate-backend"), res.headers.get("x-kvgate-attempts")]);
    await res.text();
  }
  return answers;
}

describe("two deployments fall one to each shard", () => {
  it("as partition places them", () => {
    for (const other of ["busy", "failing", "loading", "dead", "other"]) expect(new Set(partition([other, "healthy"], 2)).size).toBe(2);
    expect(new Set(partition(["failing", "streaming"], 2)).size).toBe(2);
    expect(new Set(partition(["a", "b"], 2)).size).toBe(2);
  });
});

describe("a shard whose every server answered 429 with a Retry-After", () => {
  it("passes its prompts to the other shard's server while it rests: the busy server is asked once, every prompt answered", async () => {
    upstream.reset();
    const answers = await prompts("shard-rests", 12);
    expect(answers.filter(([s]) => s !== 200)).toEqual([]);
    // Its Retry-After (30 s) asked every client to spare it: only the first prompt keyed there met its 429.
    expect(upstream.stats("rate-limited").requests).toBe(1);
    expect(answers.filter(([, , a]) => a !== "1")).toEqual([[200, "healthy", "2"]]);
    await vi.waitFor(async () => expect(await gw.inFlight("shard-rests")).toBe(0), EVENTUALLY);
    const busy = (await gw.status("shard-rests")).backends.find((b) => b.id === "busy");
    expect(busy?.restingUntil).toBeGreaterThan(Date.now() + 20_000);
  });
});

describe("a shard of three servers all resting after their 429s", () => {
  it("does not spend a request's three attempts on them: once they rest, every prompt is answered by the other shard", async () => {
    upstream.reset();
    // The first prompt keyed to the busy shard may meet three of its servers' 429s (its three attempts: the client gets the last).
    const first = await prompts("shard-all-rest", 12, "first round");
    // Until they rested, each of 8 prompts of 12 met three 429s (24 in all), with three healthy servers on the other shard.
    expect(first.filter(([s]) => s !== 200).length).toBeLessThanOrEqual(1);
    const metBefore = upstream.stats("rate-limited").requests;
    expect(metBefore).toBeGreaterThan(0);
    expect(metBefore).toBeLessThanOrEqual(3);
    const answers = await prompts("shard-all-rest", 12, "second round");
    expect(answers.filter(([s]) => s !== 200)).toEqual([]);
    expect(upstream.stats("rate-limited").requests).toBe(metBefore);
    await vi.waitFor(async () => expect(await gw.inFlight("shard-all-rest")).toBe(0), EVENTUALLY);
  });
});

describe("a shard whose only server fails every request", () => {
  for (const [group, failing, how] of [
    ["shard-fails", "failing", "a 500"],
    ["shard-loads", "loading", "a 503 unavailable_error (its model loading)"],
    ["shard-refuses", "dead", "a refused connection"],
  ] as const) {
    it(`${how}: every prompt keyed to it is answered by the other shard's server, and nothing stays in flight`, async () => {
      const answers = await prompts(group, 12);
      expect(answers.filter(([s, b]) => s !== 200 || b !== "healthy")).toEqual([]);
      // Keyed to the failing shard, a prompt was tried there first, until its breaker opened.
      expect(answers.some(([, , a]) => a === "2")).toBe(true);
      await vi.waitFor(async () => expect(await gw.inFlight(group)).toBe(0), EVENTUALLY);
      const status = await gw.status(group);
      expect(status.backends.map((b) => b.id).sort()).toEqual([failing, "healthy"].sort());
      expect(status.backends.find((b) => b.id === failing)?.failed).toBeGreaterThan(0);
      expect(status.backends.find((b) => b.id === "healthy")?.completed).toBe(12);
    });
  }
});

describe("a shard whose only server is drained, then disabled, then enabled", () => {
  it("gets no prompt while it takes none, and its share again once enabled", async () => {
    const completed = async () => Object.fromEntries((await gw.status("shard-drained")).backends.map((b) => [b.id, b.completed]));
    const before = await prompts("shard-drained", 8, "before");
    expect(new Set(before.map(([, b]) => b))).toEqual(new Set(["other", "healthy"]));
    for (const action of ["drain", "disable"]) {
      expect((await adminCall(gw.url, ADMIN_KEY, "POST", `/groups/shard-drained/deployments/other/${action}`)).status).toBe(200);
      // A lease's release (which counts the completion) may land after its answer's last byte: count from a settled fleet.
      await vi.waitFor(async () => expect(await gw.inFlight("shard-drained")).toBe(0), EVENTUALLY);
      const was = await completed();
      const answers = await prompts("shard-drained", 8, action);
      expect(answers.filter(([s, b, a]) => s !== 200 || b !== "healthy" || a !== "1")).toEqual([]);
      expect((await completed()).other).toBe(was.other);
    }
    expect((await adminCall(gw.url, ADMIN_KEY, "POST", "/groups/shard-drained/deployments/other/enable")).status).toBe(200);
    await vi.waitFor(async () => expect(new Set((await prompts("shard-drained", 8, "enabled")).map(([, b]) => b))).toEqual(new Set(["other", "healthy"])), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("shard-drained")).toBe(0), EVENTUALLY);
  });
});

describe("streams failed over from one shard to the other, then left by their clients", () => {
  it("leave nothing in flight on either shard", async () => {
    const streams: Response[] = [];
    for (let i = 0; i < 8; i++) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "shard-streams", stream: true, messages: [{ role: "user", content: `stream ${i}: `.padEnd(400, "tide tables; ") }] }),
      });
      expect([res.status, res.headers.get("x-kvgate-backend")]).toEqual([200, "streaming"]);
      streams.push(res);
    }
    // Each stream flows; then every client leaves.
    for (const res of streams) {
      const reader = res.body?.getReader();
      expect((await reader?.read())?.done).toBe(false);
      await reader?.cancel();
    }
    expect(streams.some((r) => r.headers.get("x-kvgate-attempts") === "2")).toBe(true);
    await vi.waitFor(async () => expect(await gw.inFlight("shard-streams")).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(upstream.stats("endless-stream").open).toBe(0), EVENTUALLY);
  });
});

describe("a shard of three servers that all fail every request with a 500", () => {
  it("does not take the second failure for the request's own: the other shard answers, and the failing servers' breakers open", async () => {
    upstream.reset();
    const answers = await prompts("shard-all-crash", 12);
    // A prompt keyed to the crashing shard was tried on two of its servers, found failing on both as if it
    // were a body every server crashes on, and neither was charged: 8 prompts of 12 had a 502, for good.
    expect(answers.filter(([s]) => s !== 200)).toEqual([]);
    const crashing = SIX.filter((_, i) => SIX_SHARDS[i] === SIX_SHARDS[0]);
    await vi.waitFor(async () => expect(await gw.inFlight("shard-all-crash")).toBe(0), EVENTUALLY);
    const failed = (await gw.status("shard-all-crash")).backends.filter((b) => crashing.includes(b.id)).reduce((n, b) => n + b.failed, 0);
    expect(failed).toBe(upstream.stats("crash-on").requests);
  });
});

describe("engines dead behind their proxies, a shard's all and one of another's, beside a healthy shard", () => {
  it("are told from a body every server fails on by a shard neither failure was on: every prompt is answered", async () => {
    upstream.reset();
    // Two proxies' 502s alike ask one more backend; asked of the prompt's own shard again, a dead one answered it alike.
    const answers = await prompts("shard-proxied-dead", 80);
    expect(answers.filter(([s]) => s !== 200)).toEqual([]);
  });
});

describe("a body every server crashes on, in a sharded group", () => {
  it("still follows the request: its second failure, on the other shard, ends it with x-should-retry false, and neither server is charged", async () => {
    upstream.reset();
    const res = await chat("shard-crash-on-body", "CRASH the harbour");
    expect([res.status, res.headers.get("x-kvgate-attempts"), res.headers.get("x-should-retry")]).toEqual([502, "2", "false"]);
    await res.text();
    await vi.waitFor(async () => expect(await gw.inFlight("shard-crash-on-body")).toBe(0), EVENTUALLY);
    expect((await gw.status("shard-crash-on-body")).backends.map((b) => [b.id, b.failed]).sort()).toEqual([["a", 0], ["b", 0]]);
  });
});

describe("a sharded group whose fleet changes while requests flow", () => {
  it("answers every request while deployments come and go and its shards go 2 → 3 → 1, and ends with nothing in flight", async () => {
    const gpu = (i: number) => hostile(i % 2 === 0 ? "ok" : "crash-on", `live-${i}`);
    expect((await adminCall(gw.url, ADMIN_KEY, "POST", "/groups", { name: "shard-live", shards: 2, deployments: [0, 1, 2, 3].map(gpu) })).status).toBe(201);
    let flowing = true;
    const statuses: number[] = [];
    const client = async (c: number) => {
      for (let i = 0; flowing; i++) {
        const res = await chat("shard-live", `client ${c} question ${i} on the tides`);
        statuses.push(res.status);
        await res.text();
      }
    };
    const clients = [0, 1, 2, 3].map(client);
    const pause = () => new Promise((r) => setTimeout(r, 400));
    const changes: [string, string, unknown?][] = [
      ["POST", "/groups/shard-live/deployments", gpu(4)],
      ["PATCH", "/groups/shard-live", { shards: 3 }],
      ["DELETE", "/groups/shard-live/deployments/live-1"],
      ["POST", "/groups/shard-live/deployments", gpu(5)],
      ["PATCH", "/groups/shard-live", { shards: 1 }],
      ["DELETE", "/groups/shard-live/deployments/live-0"],
      ["PATCH", "/groups/shard-live", { shards: 2 }],
    ];
    for (const [method, path, body] of changes) {
      await pause();
      expect((await adminCall(gw.url, ADMIN_KEY, method, path, body)).status, `${method} ${path}`).toBeLessThan(300);
    }
    await pause();
    flowing = false;
    await Promise.all(clients);
    expect(statuses.length).toBeGreaterThan(20);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    await vi.waitFor(async () => expect(await gw.inFlight("shard-live")).toBe(0), EVENTUALLY);
    // Every shard's servers in one list, as the group now has them.
    await vi.waitFor(async () => expect((await gw.status("shard-live")).backends.map((b) => b.id).sort()).toEqual(["live-2", "live-3", "live-4", "live-5"]), EVENTUALLY);
    const metrics = await (await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })).text();
    for (const id of ["live-2", "live-3", "live-4", "live-5"]) expect(metrics).toContain(`backend="${id}"`);
    expect(metrics).not.toContain("\u001f");
  }, 60_000);
});
