import { evictDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { unpackKeys } from "../../src/metrics/key-columns.ts";
import { shardObjectName } from "../../src/sharding/partition.ts";
import type { IssuedKeyView } from "../../src/tenants/admin-api.ts";
import { admin, ok } from "./admin.ts";
import { chat, conversation, expectIdle, gateway } from "./gateway.ts";

/**
 * GET /metrics across the restart of one routing object of a sharded group (an eviction, the
 * runtime moving or updating it): the object comes back with its versions, restored from storage,
 * and nothing it counted. Prometheus reads any fall of a counter as a reset to 0 and counts the new
 * value whole as the increase: a series that adds up several objects' counts and falls by one
 * object's part has rate() and increase() count the others' totals again.
 */

const SCRAPER = { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` };
const GROUP = "sharded";

async function scrape(): Promise<string> {
  const res = await gateway("/metrics", { headers: SCRAPER });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return text;
}

/** The group's counter and histogram samples (name and labels → value), read from the text: each family's samples follow its TYPE line. */
function countersOf(text: string, group: string): Map<string, number> {
  const out = new Map<string, number>();
  let counts = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("# TYPE ")) counts = / (counter|histogram)$/.test(line);
    if (!counts || line.startsWith("#") || !line.includes(`group="${group}"`)) continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

describe("a sharded group one routing object of which restarted", () => {
  it("has no counter fall but to what the restarted object counted since (0): each series is one object's", async () => {
    const { key, id } = await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: {} }), 201);
    // Conversations on many system prompts: the key's requests go to both shards.
    for (const topic of ["lichen", "moss", "fern", "sedge", "rush", "reed", "heather", "bracken", "gorse", "thrift"]) {
      const res = await chat(GROUP, conversation(topic), {}, { headers: { authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
      await res.text();
    }
    await expectIdle(shardObjectName(GROUP, 0));
    await expectIdle(shardObjectName(GROUP, 1));
    const perShard = await Promise.all([0, 1].map(async (i) => unpackKeys(await env.MODEL_GROUP.getByName(shardObjectName(GROUP, i)).metrics()).keys.find((k) => k.id === id)?.requests ?? 0));
    expect(perShard.every((n) => n > 0), `the key's requests per shard: ${perShard.join(", ")}`).toBe(true);
    const before = countersOf(await scrape(), GROUP);
    expect([...before.keys()].some((k) => k.includes(`key="${id}"`))).toBe(true);

    // Shard 1's object restarts: it restores its version, and counts from 0.
    await evictDurableObject(env.MODEL_GROUP.getByName(shardObjectName(GROUP, 1)));
    const after = countersOf(await scrape(), GROUP);
    expect([...after.keys()].some((k) => k.includes('backend="'))).toBe(true);

    // A series that fell fell to 0 (or went): what the restarted object counted since; none fell to another shard's part.
    const fellPart = [...before].filter(([k, v]) => (after.get(k) ?? 0) < v && (after.get(k) ?? 0) > 0).map(([k, v]) => `${k}: ${v} -> ${after.get(k)}`);
    expect(fellPart).toEqual([]);
    // Shard 1's own series fell to 0: Prometheus reads it as the reset it was.
    expect(after.get(`kvgate_key_requests_total{group="${GROUP}",key="${id}",shard="1"}`) ?? 0).toBe(0);
    // Shard 0's, the group's own object's, goes on (named so: shard="0").
    const ownShard = `kvgate_key_requests_total{group="${GROUP}",key="${id}",shard="0"}`;
    expect(before.get(ownShard)).toBe(perShard[0]);
    expect(after.get(ownShard)).toBe(before.get(ownShard));
  });
});
