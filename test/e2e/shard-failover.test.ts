import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
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

/** Six deployments over two shards: those of gpu-0's shard rate-limit, the others answer. */
const SIX = ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"];
const SIX_SHARDS = partition(SIX, 2);

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway(
    {
      modelGroups: [
        pair("shard-rests", hostile("rate-limited:30", "busy")),
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
    expect(new Set(partition(["busy", "healthy"], 2)).size).toBe(2);
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
