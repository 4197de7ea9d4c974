import { describe, expect, it, vi } from "vitest";
import { chat, conversation, EVENTUALLY, expectIdle, status } from "./gateway.ts";

describe("prefix-aware routing through the gateway", () => {
  it("sends every turn of a conversation to the backend that holds its prefix", async () => {
    const first = await chat("routing", conversation("glaciers", 1));
    expect(first.status).toBe(200);
    await first.text();
    const backend = first.headers.get("x-kvgate-backend");
    for (let turns = 2; turns <= 4; turns++) {
      const res = await chat("routing", conversation("glaciers", turns));
      await res.text();
      expect(res.headers.get("x-kvgate-backend")).toBe(backend);
      expect(res.headers.get("x-kvgate-reason")).toBe("prefix-hit");
      const [matched, total] = (res.headers.get("x-kvgate-prefix-blocks") ?? "").split("/").map(Number);
      expect(matched).toBeGreaterThan(0);
      expect(matched).toBeLessThan(total as number);
    }
  });

  it("queues a long prompt's whole size for its backend, not only the head its fingerprint hashed", async () => {
    // 6,400 characters, 100 blocks of 64, against a fingerprint cut at 8 blocks.
    const prompt = "the long document, page by page. ".repeat(194);
    // Held long enough that a slow machine still sees it in flight.
    const held = chat("long-prompt", [{ role: "user", content: prompt }], { kvgate_sim: { first_byte_delay_ms: 5000 } });
    // The debt drains a block a second: read it from the status that first shows the request in flight.
    const [b] = await vi.waitFor(async () => {
      const s = await status("long-prompt");
      expect(s.backends[0]?.inFlight).toBe(1);
      return s.backends;
    }, EVENTUALLY);
    // The body's bytes over 64: the prompt's 100 blocks and its JSON around it, less a block's drain at 16 tokens/s.
    expect(b?.prefillDebtBlocks).toBeGreaterThanOrEqual(99);
    expect(b?.prefillDebtBlocks).toBeLessThanOrEqual(103);
    const res = await held;
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-prefix-blocks")).toBe("0/8");
    await res.text();
    await expectIdle("long-prompt");
  }, 30_000);

  it("answers aliases from the same group", async () => {
    const res = await chat("routing-alias", conversation("glaciers", 2));
    await res.text();
    expect(res.headers.get("x-kvgate-reason")).toBe("prefix-hit");
  });

  it("spreads conversations with different prefixes over the backends", async () => {
    const topics = ["volcanoes", "tides", "comets", "lichens", "basalt", "auroras", "monsoons", "dunes", "glaciers", "fjords", "geysers", "reefs", "deltas", "mesas", "atolls", "tundra"];
    const backends = new Set<string>();
    for (const topic of topics) {
      const res = await chat("routing", conversation(topic), { kvgate_sim: { first_byte_delay_ms: 0 } });
      await res.text();
      backends.add(res.headers.get("x-kvgate-backend") ?? "");
    }
    // Sequential and idle, each new prefix goes to a least-loaded backend chosen at random:
    // sixteen of them landing on fewer than three backends would mean no spreading at all (by
    // chance: 1 in ~10,000 runs; with eight it was 1 in ~40, and a full run here hit it).
    expect(backends.size).toBeGreaterThanOrEqual(3);
    await expectIdle("routing");
  });

  it("puts no more than 4 in flight on any backend in a burst of 16 identical prefixes (saturation 4)", async () => {
    const messages = conversation("burst");
    // Held long enough upstream that all 16 are routed before the first ends, however slow the
    // machine: a response that ended early would free a slot for a late request to take.
    const pending = Array.from({ length: 16 }, () => chat("burst", messages, { kvgate_sim: { first_byte_delay_ms: 3000 } }));
    // Look at the counts once all 16 are in flight (not after a fixed sleep: a loaded machine
    // had routed none of them 200 ms in).
    const during = await vi.waitFor(async () => {
      const s = await status("burst");
      expect(s.backends.reduce((n, b) => n + b.inFlight, 0)).toBe(16);
      return s;
    }, EVENTUALLY);
    expect(during.backends.map((b) => b.inFlight)).toEqual([4, 4, 4, 4]);
    const responses = await Promise.all(pending);
    const perBackend = new Map<string, number>();
    for (const res of responses) {
      expect(res.status).toBe(200);
      await res.text();
      const b = res.headers.get("x-kvgate-backend") ?? "";
      perBackend.set(b, (perBackend.get(b) ?? 0) + 1);
    }
    expect([...perBackend.values()]).toEqual([4, 4, 4, 4]);
    expect(responses.some((r) => r.headers.get("x-kvgate-reason") === "prefix-hit")).toBe(true);
    await expectIdle("burst");
  }, 30_000);
});
