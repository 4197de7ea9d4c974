import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { typeDeopts } from "../support/deopts.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * The prompt's hashing in the runtime that serves it: the bundled gateway in workerd, its V8 run
 * with --trace-deopt (Miniflare passes MINIFLARE_WORKERD_V8_FLAGS on), 60 chat requests with a
 * 20 KB system prompt through it. Each request hashes its prompt with a new BlockHasher, and none
 * may deoptimise the hasher's loop for a type its optimised code did not expect: lanes seeded
 * above 2^31, or an empty array of hashes changing kind at its first hash, did on every new one,
 * and in about two of five workerd processes V8 then left the loop unoptimised, at twice the
 * Worker's CPU per request (README, Benchmarks → Gateway processes). Its loop is
 * BlockHasher.hashInto, a static method whose name survives the minifier; before, it was `push`,
 * the bundle's only method of that name these requests run (the other, src/stream/usage.ts's,
 * reads streamed usage). test/unit/block-hasher-jit.test.ts checks the same under Node's V8.
 */

let fleet: Fleet;
let gw: TestGateway;
const SYSTEM = "You are a careful assistant. Answer from the documents given. ".repeat(320);

beforeAll(async () => {
  fleet = await startFleet({ workers: 2, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  const before = process.env.MINIFLARE_WORKERD_V8_FLAGS;
  process.env.MINIFLARE_WORKERD_V8_FLAGS = "--trace-deopt";
  try {
    gw = await startTestGateway({ modelGroups: [{ name: "m", deployments: fleet.urls.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: "sim-7b" })) }] });
  } finally {
    if (before === undefined) delete process.env.MINIFLARE_WORKERD_V8_FLAGS;
    else process.env.MINIFLARE_WORKERD_V8_FLAGS = before;
  }
}, 180_000);
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
});

describe("the block hasher in workerd", () => {
  it("is not deoptimised for a type its optimised code did not expect", async () => {
    for (let r = 0; r < 60; r++) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "m", max_tokens: 2, messages: [{ role: "system", content: SYSTEM }, { role: "user", content: `question ${r}: ${"why ".repeat(r % 40)}` }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
    }
    const traced = gw.logs.filter((line) => line.includes("bailout"));
    // The trace is on: the runtime's other functions deoptimise now and then (or this proves nothing).
    expect(traced.length).toBeGreaterThan(0);
    expect(typeDeopts(traced, ["push", "hashInto"])).toEqual([]);
  });
});
