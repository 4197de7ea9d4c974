import { describe, expect, it } from "vitest";
import { useFleets } from "../support/fleets.ts";
import { PrefixCache } from "../../bench/fleet/kv-cache.ts";
import { textBlocks } from "../../bench/fleet/prompt-blocks.ts";
import { postJson, type CompletionBody } from "../../bench/fleet/sim-client.ts";

const fleetOf = useFleets();

async function worker(options: Parameters<typeof fleetOf>[0] = {}): Promise<string> {
  const fleet = await fleetOf({ workers: 1, ...options });
  return fleet.urls[0] ?? "";
}

const SYSTEM = "You are a careful assistant. ".repeat(20); // ~560 bytes = 140 tokens

async function chat(base: string, messages: unknown[], maxTokens = 4): Promise<CompletionBody> {
  const r = await postJson(`${base}/v1/chat/completions`, { model: "kvgate-sim", messages, max_tokens: maxTokens });
  expect(r.status).toBe(200);
  return r.json as CompletionBody;
}

const cached = (b: CompletionBody): number => b.usage.prompt_tokens_details.cached_tokens;

describe("prefix cache over HTTP", () => {
  it("reports cached_tokens on a repeated request, in whole 16-token blocks", async () => {
    const base = await worker();
    const messages = [
      { role: "system", content: SYSTEM },
      { role: "user", content: "What is a KV cache?" },
    ];
    const first = await chat(base, messages);
    const second = await chat(base, messages);
    expect(cached(first)).toBe(0);
    expect(cached(second)).toBeGreaterThan(0);
    expect(cached(second) % 16).toBe(0);
    expect(cached(second)).toBeLessThan(second.usage.prompt_tokens);
    expect(second.usage.prompt_tokens - cached(second)).toBeLessThanOrEqual(16);
  });

  it("hits only on the shared prefix: same system prompt partly, different system prompt not at all", async () => {
    const base = await worker();
    await chat(base, [
      { role: "system", content: SYSTEM },
      { role: "user", content: "First question, rather long so that it spans a block or two of tokens." },
    ]);
    const sameSystem = await chat(base, [
      { role: "system", content: SYSTEM },
      { role: "user", content: "A different question." },
    ]);
    expect(cached(sameSystem)).toBeGreaterThan(0);
    expect(cached(sameSystem)).toBeLessThanOrEqual(Math.ceil(SYSTEM.length / 4));

    const otherSystem = await chat(base, [
      { role: "system", content: "Another persona entirely. " + SYSTEM },
      { role: "user", content: "A different question." },
    ]);
    expect(cached(otherSystem)).toBe(0);
  });

  it("caches the answer too, so the next turn of a conversation hits through it", async () => {
    const base = await worker();
    const turn1 = [
      { role: "system", content: SYSTEM },
      { role: "user", content: "Tell me a story." },
    ];
    const answer = await chat(base, turn1, 64);
    const turn2 = [...turn1, { role: "assistant", content: answer.choices[0]?.message?.content ?? "" }, { role: "user", content: "Go on." }];
    const second = await chat(base, turn2);
    // Beyond the first turn's prompt: the 64 answer tokens (256 bytes) are cached as well.
    expect(cached(second)).toBeGreaterThan(answer.usage.prompt_tokens);
  });

  it("evicts least recently used blocks at a small capacity, from a prefix's tail", async () => {
    // Each prompt renders to 531 bytes: 8 full blocks. Capacity 10 holds one prompt, not two.
    const base = await worker({ kvCapacityBlocks: 10 });
    const a = [{ role: "user", content: "A".repeat(500) }];
    const b = [{ role: "user", content: "B".repeat(500) }];
    await chat(base, a, 1);
    expect(cached(await chat(base, a, 1))).toBe(8 * 16);
    await chat(base, b, 1);
    // B's 8 blocks evicted A's 6 deepest; A's first 2 blocks were its most recently used.
    expect(cached(await chat(base, a, 1))).toBe(2 * 16);
  });

  it("forgets a prefix entirely once other prompts have filled the cache", async () => {
    const base = await worker({ kvCapacityBlocks: 8 });
    const a = [{ role: "user", content: "A".repeat(500) }];
    await chat(base, a, 1);
    await chat(base, [{ role: "user", content: "B".repeat(500) }], 1);
    expect(cached(await chat(base, a, 1))).toBe(0);
  });

  it("keeps separate caches per worker", async () => {
    const fleet = await fleetOf({ workers: 2 });
    const messages = [{ role: "user", content: SYSTEM }];
    await chat(fleet.urls[0] ?? "", messages);
    expect(cached(await chat(fleet.urls[1] ?? "", messages))).toBe(0);
    expect(cached(await chat(fleet.urls[0] ?? "", messages))).toBeGreaterThan(0);
  });

  it("caches token-id prompts of /v1/completions", async () => {
    const base = await worker();
    const prompt = Array.from({ length: 100 }, (_, i) => i + 1);
    const body = { model: "kvgate-sim", prompt, max_tokens: 1 };
    await postJson(`${base}/v1/completions`, body);
    const second = (await postJson(`${base}/v1/completions`, body)).json as CompletionBody;
    expect(second.usage.prompt_tokens).toBe(100);
    expect(cached(second)).toBe(96);
  });
});

describe("PrefixCache", () => {
  it("matches the leading run of a chain only", () => {
    const cache = new PrefixCache(100);
    cache.insert([1, 2, 3]);
    expect(cache.match([1, 2, 3, 4], 10)).toBe(3);
    expect(cache.match([9, 2, 3], 10)).toBe(0);
    expect(cache.match([1, 2, 3], 2)).toBe(2);
  });

  it("evicts a chain from its tail, keeping every held block's prefix", () => {
    const cache = new PrefixCache(4);
    cache.insert([1, 2, 3]);
    cache.insert([10, 11]);
    // Capacity 4 of 5 blocks: the deepest block of the older chain goes first.
    expect(cache.size).toBe(4);
    expect(cache.match([1, 2, 3], 10)).toBe(2);
    expect(cache.match([10, 11], 10)).toBe(2);
    expect(cache.evictions).toBe(1);
  });

  it("touching a chain protects it from eviction", () => {
    const cache = new PrefixCache(4);
    cache.insert([1, 2]);
    cache.insert([3, 4]);
    cache.insert([1, 2]);
    cache.insert([5, 6]);
    expect(cache.match([1, 2], 10)).toBe(2);
    expect(cache.match([3, 4], 10)).toBe(0);
  });
});

describe("block hashing", () => {
  it("counts 4 bytes per token and hashes only full 16-token blocks", () => {
    expect(textBlocks("x".repeat(130))).toMatchObject({ tokens: 33 });
    expect(textBlocks("x".repeat(130)).chain).toHaveLength(2);
    expect(textBlocks("é".repeat(32)).tokens).toBe(16);
  });

  it("chains blocks: equal hashes at i mean equal prefixes up to block i", () => {
    const a = textBlocks("a".repeat(64) + "b".repeat(64) + "c".repeat(64)).chain;
    const b = textBlocks("a".repeat(64) + "b".repeat(64) + "d".repeat(64)).chain;
    const c = textBlocks("z".repeat(64) + "b".repeat(64) + "c".repeat(64)).chain;
    expect(a.slice(0, 2)).toEqual(b.slice(0, 2));
    expect(a[2]).not.toBe(b[2]);
    // Same block content after a different prefix hashes differently.
    expect(c[1]).not.toBe(a[1]);
    expect(c[2]).not.toBe(a[2]);
  });

  it("extends a prefix's chain to the same hashes as hashing the whole text", () => {
    const prompt = "p".repeat(150);
    const whole = textBlocks(prompt + "q".repeat(100)).chain;
    expect(textBlocks(prompt + "q".repeat(100), textBlocks(prompt).chain).chain).toEqual(whole);
  });
});
