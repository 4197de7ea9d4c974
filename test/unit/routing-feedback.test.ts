import { describe, expect, it } from "vitest";
import { PrefixCache } from "../../bench/fleet/kv-cache.ts";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { BackendFeedback } from "../../src/routing/feedback.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import { CharsPerTokenLearner } from "../../src/routing/learned/chars-per-token.ts";
import { capacityVote, KvCapacityLearner, type CapacityReport } from "../../src/routing/learned/kv-capacity.ts";
import { PrefillRateLearner } from "../../src/routing/learned/prefill-rate.ts";
import { sampledForFeedback } from "../../src/routing/learned/sampling.ts";
import type { BackendSnapshot, RouteDecision, TokenUsage } from "../../src/routing/protocol.ts";

/**
 * Feedback from the engines: each learner on scripted reports (convergence from 4× off both ways,
 * bounds, damping, a missing cache report), and the capacity learner through the router against a
 * scripted engine — the fleet simulator's own LRU prefix cache — as a release carries usage.
 */

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

describe("characters per token", () => {
  it("converges on the backend's figure from the prior of 4, up or down, and stays within its bounds", () => {
    for (const truth of [5.3, 2.5]) {
      const l = new CharsPerTokenLearner();
      const r = rng(1);
      for (let i = 0; i < 200; i++) {
        const tokens = 200 + Math.floor(r() * 2000);
        // ±10% noise per prompt: templates, short messages' padding.
        l.observe(tokens * truth * (0.9 + 0.2 * r()), tokens);
      }
      expect(l.value).toBeGreaterThan(truth * 0.95);
      expect(l.value).toBeLessThan(truth * 1.05);
    }
    const wild = new CharsPerTokenLearner();
    for (let i = 0; i < 500; i++) wild.observe(1_000_000, 40);
    expect(wild.value).toBe(16);
  });

  it("moves little on one odd prompt, and takes none too short to say anything", () => {
    const l = new CharsPerTokenLearner();
    for (let i = 0; i < 100; i++) l.observe(4000, 1000);
    expect(l.value).toBeCloseTo(4, 5);
    l.observe(100_000, 1000);
    expect(l.value).toBeLessThan(4 * 1.03);
    const before = l.value;
    expect(l.observe(640, 10)).toBe(false);
    expect(l.value).toBe(before);
  });
});

describe("KV capacity", () => {
  const report = (o: Partial<CapacityReport>): CapacityReport => ({ matched: 100, total: 120, cachedBlocks: 100, answerBlocks: 4, setSize: 1000, setCapacity: 1000, recency: NaN, ...o });

  it("votes shrink when the engine holds less than the set matched, grow when more while the set evicts, else nothing", () => {
    expect(capacityVote(report({ cachedBlocks: 40 }))).toBe(-1);
    // A miss on what the set was about to evict too is no evidence to shrink; on what it had just used, it is.
    expect(capacityVote(report({ cachedBlocks: 40, recency: 0.9 }))).toBe(0);
    expect(capacityVote(report({ cachedBlocks: 40, recency: 0.5 }))).toBe(0);
    expect(capacityVote(report({ cachedBlocks: 40, recency: 0.2 }))).toBe(-1);
    expect(capacityVote(report({ cachedBlocks: 98 }))).toBe(0);
    // The previous answer, cached by the engine and never hashed by the router, is no evidence.
    expect(capacityVote(report({ cachedBlocks: 108 }))).toBe(0);
    expect(capacityVote(report({ matched: 8, cachedBlocks: 100 }))).toBe(1);
    // A set that is not full forgot nothing: the engine holding more says nothing of its size.
    expect(capacityVote(report({ matched: 8, cachedBlocks: 100, setSize: 300 }))).toBe(0);
  });

  it("steps multiplicatively, smaller each time it turns, never on one odd report, and stays within 1/16× to 16× of the configured value", () => {
    const l = new KvCapacityLearner(1000);
    expect(l.observe(report({ cachedBlocks: 0 }))).toBe(false);
    expect(l.blocks).toBe(1000);
    for (let i = 0; i < 3; i++) l.observe(report({ cachedBlocks: 0 }));
    expect(l.blocks).toBe(500);
    for (let i = 0; i < 4; i++) l.observe(report({ matched: 8, cachedBlocks: 100 }));
    expect(l.blocks).toBe(Math.round(500 * Math.SQRT2));
    for (let i = 0; i < 1000; i++) l.observe(report({ cachedBlocks: 0 }));
    expect(l.blocks).toBe(63);
    for (let i = 0; i < 1000; i++) l.observe(report({ matched: 0, cachedBlocks: 100 }));
    expect(l.blocks).toBe(16_000);
  });

  /**
   * One backend behind the router; the engine is the simulator's prefix cache (an LRU of 16-token
   * blocks, trimmed from a chain's tail) of `engineBlocks`, and reports what it held of each
   * prompt. Sessions share a system prompt and come back in a random order, so the distance
   * between a session's turns spreads either side of the engine's capacity.
   */
  function run(configured: number, engineBlocks: number, requests: number, cacheReported = true): BackendSnapshot {
    const g = group({ kvCapacityBlocks: configured });
    const router = new GroupRouter("g", rng(7));
    router.install(g, 0);
    const engine = new PrefixCache(engineBlocks);
    const r = rng(3);
    const system = Array.from({ length: 8 }, (_, i) => i + 1);
    const sessions: number[][] = [];
    let block = 1000;
    for (let i = 0; i < requests; i++) {
      // Mostly a conversation coming back, sometimes a new one (and a long one starts over).
      let s = Math.floor(r() * sessions.length);
      if (sessions.length < 6 || r() < 0.15 || (sessions[s] as number[]).length > 120) {
        s = sessions.length;
        sessions.push([...system, ...Array.from({ length: 16 }, () => block++)]);
      }
      const chain = sessions[s] as number[];
      const d = router.route(g.version, chain, [], i) as RouteDecision;
      const cached = engine.match(chain, chain.length);
      engine.insert(chain);
      const usage: TokenUsage = { prompt: chain.length * 16, completion: 16, cached: cacheReported ? cached * 16 : 0, cacheReported };
      router.release({ lease: d.lease, outcome: "ok", ttftMs: 50, streamed: true, usage }, i);
      // The next turn: the answer and a new question.
      for (let k = 0; k < 6; k++) chain.push(block++);
    }
    return router.snapshot()[0] as BackendSnapshot;
  }

  it("converges toward the engine's capacity through the router, from 4× too big and 4× too small", () => {
    const engine = 600;
    for (const configured of [4 * engine, engine / 4]) {
      const b = run(configured, engine, 3000);
      // Within one step (×√2) of the engine's capacity.
      expect(b.learned.kvCapacityBlocks).toBeGreaterThanOrEqual(Math.floor(engine / Math.SQRT2));
      expect(b.learned.kvCapacityBlocks).toBeLessThanOrEqual(Math.ceil(engine * Math.SQRT2));
      // The prefix set follows: its capacity is the learned one.
      expect(b.prefixCapacity).toBe(b.learned.kvCapacityBlocks);
      expect(b.learned.charsPerToken).toBeCloseTo(4, 1);
    }
  });

  /**
   * llm-d's b2b-saas shape on one backend: groups of prompts under a shared system prompt, each
   * prompt coming back whole, drawn at random from the pool. The engine also holds each answer
   * (a quarter of a question's blocks), which the router never hashes: it holds a little fewer
   * prompts than the set, and what it drops first is what the set is about to drop — questions
   * asked longest ago. Those misses come at the set's tail; they say the set is at most a
   * little too big, and a set a little too big costs routing nothing, where one too small
   * forgets groups the engine still holds and sends them elsewhere (b2b-saas in virtual time:
   * kvCapacityBlocks × 0.7 kept 0.81 of the ceiling's hits, × 1 to × 2 0.935–0.936).
   */
  function runPool(configured: number, engineBlocks: number, requests: number): BackendSnapshot {
    const g = group({ kvCapacityBlocks: configured });
    const router = new GroupRouter("g", rng(7));
    router.install(g, 0);
    const engine = new PrefixCache(engineBlocks);
    const r = rng(5);
    const prompts: number[][] = [];
    let block = 1000;
    for (let gr = 0; gr < 12; gr++) {
      const system = Array.from({ length: 24 }, () => block++);
      for (let q = 0; q < 5; q++) prompts.push([...system, ...Array.from({ length: 16 }, () => block++)]);
    }
    for (let i = 0; i < requests; i++) {
      const chain = prompts[Math.floor(r() * prompts.length)] as number[];
      const d = router.route(g.version, chain, [], i) as RouteDecision;
      const cached = engine.match(chain, chain.length);
      engine.insert([...chain, ...Array.from({ length: 4 }, () => block++)]);
      const usage: TokenUsage = { prompt: chain.length * 16, completion: 64, cached: cached * 16, cacheReported: true };
      router.release({ lease: d.lease, outcome: "ok", ttftMs: 50, streamed: true, usage }, i);
    }
    return router.snapshot()[0] as BackendSnapshot;
  }

  it("keeps a right capacity when the engine drops only what the set was about to: prompts that come back whole", () => {
    // The pool is 12 × 24 + 60 × 16 = 1,248 blocks to the set, 1,488 with an answer each to the engine.
    const b = runPool(1000, 1000, 4000);
    expect(b.learned.reports.cached).toBe(4000);
    expect(b.prefixBlocks).toBe(1000);
    expect(b.learned.capacitySteps).toBe(0);
    expect(b.learned.kvCapacityBlocks).toBe(1000);
  });

  it("learns no capacity from a request with no prompt to hash (vLLM's prompt_embeds): the set had nothing to predict its cache hits with", () => {
    const g = group({ kvCapacityBlocks: 400 });
    const router = new GroupRouter("g", rng(7));
    router.install(g, 0);
    let t = fillSet(router, g, 50, 0);
    // The engine caches embeddings it was sent before and says so; the gateway routed them on no chain.
    for (let i = 0; i < 200; i++) {
      const d = router.route(g.version, [], [], t++) as RouteDecision;
      router.release({ lease: d.lease, outcome: "ok", ttftMs: 50, streamed: true, usage: { prompt: 2000, completion: 16, cached: 1984, cacheReported: true } }, t++);
    }
    const b = router.snapshot()[0] as BackendSnapshot;
    expect(b.learned.reports.cached).toBe(250);
    expect(b.learned.capacitySteps).toBe(0);
    expect(b.learned.kvCapacityBlocks).toBe(400);
  });

  it("learns nothing from a completions batch, whose chain is its first prompt's and its usage the whole batch's (found by review: characters per token fell to its floor)", () => {
    const g = group({});
    const router = new GroupRouter("g", rng(7));
    router.install(g, 0);
    let t = 0;
    for (let i = 0; i < 100; i++) {
      // A batch of a thousand one-block prompts: its chain is the first's, its size (blocks) the whole body's.
      const d = router.route(g.version, [10_000 + i], [], t++, undefined, false, 1000, undefined, false, false, undefined, false, false, true) as RouteDecision;
      router.release({ lease: d.lease, outcome: "ok", ttftMs: 50, streamed: true, usage: { prompt: (1000 * g.blockChars) / 4, completion: 16, cached: 900, cacheReported: true } }, t++);
    }
    const { learned } = router.snapshot()[0] as BackendSnapshot;
    expect(learned).toMatchObject({ charsPerToken: 4, reports: { usage: 0, cached: 0 }, capacitySteps: 0, prefillTokensPerSec: learned.configured.prefillTokensPerSec });
  });

  it("learns nothing from a Responses follow-up whose input fills maxPrefixBlocks: its usage counts the stored conversation, and a cut chain no longer says so (found by review: kvCapacityBlocks 400 to 3,200)", () => {
    const g = group({ kvCapacityBlocks: 400 }, { maxPrefixBlocks: 16, feedback: { sampleRate: 1 } });
    const router = new GroupRouter("g", rng(7));
    router.install(g, 0);
    let t = fillSet(router, g, 60, 0);
    const before = (router.snapshot()[0] as BackendSnapshot).learned.capacitySteps;
    for (let i = 0; i < 100; i++) {
      // The input's chain, cut at maxPrefixBlocks; the Worker says the prompt is partial (RouteCall.partial).
      const chain = Array.from({ length: 16 }, (_, k) => 500_000 + i * 100 + k);
      const d = router.route(g.version, chain, [], t++, undefined, false, 17, undefined, false, false, undefined, false, false, true) as RouteDecision;
      // The engine prefilled the stored conversation, nearly all cached, and then the input.
      router.release({ lease: d.lease, outcome: "ok", ttftMs: 50, streamed: true, usage: { prompt: 3000 + 16 * 16, completion: 16, cached: 2990, cacheReported: true } }, t++);
    }
    const { learned } = router.snapshot()[0] as BackendSnapshot;
    expect(learned.capacitySteps - before).toBe(0);
    expect(learned.kvCapacityBlocks).toBe(400);
  });

  it("learns no characters per token from a prompt with media, whose blocks are a fixed figure for each image (found by review: image answers dragged it)", () => {
    const g = group({});
    const router = new GroupRouter("g", rng(7));
    router.install(g, 0);
    let t = 0;
    for (let i = 0; i < 100; i++) {
      // 66 blocks, 64 of them a photo's stand-in (src/prefix/media.ts); the engine spent 300 tokens on it, not 1,024.
      const chain = Array.from({ length: 66 }, (_, k) => 20_000 + i * 100 + k);
      const d = router.route(g.version, chain, [], t++, undefined, false, undefined, undefined, false, false, undefined, true) as RouteDecision;
      router.release({ lease: d.lease, outcome: "ok", ttftMs: 50, streamed: true, usage: { prompt: 340, completion: 16, cached: 0, cacheReported: true } }, t++);
    }
    const { learned } = router.snapshot()[0] as BackendSnapshot;
    expect(learned.reports.usage).toBe(100);
    expect(learned.charsPerToken).toBe(4);
  });

  it("learns no capacity from a prompt with media: its stand-in blocks are no measure of what the engine holds of it (found by review: a VLM spending 576 tokens an image shrank it to its floor)", () => {
    const g = group({});
    const router = new GroupRouter("g", rng(7));
    router.install(g, 0);
    const configured = (router.snapshot()[0] as BackendSnapshot).learned.kvCapacityBlocks;
    let t = 0;
    for (let s = 0; s < 60; s++) {
      // Turn 1: two text blocks, a photo's 64-block stand-in (src/prefix/media.ts), one text block; turn 2 three more.
      const base = 1_000_000 * (s + 1);
      const turn1 = Array.from({ length: 67 }, (_, k) => base + k);
      const d1 = router.route(g.version, turn1, [], t++, undefined, false, undefined, undefined, false, false, undefined, true) as RouteDecision;
      router.release({ lease: d1.lease, outcome: "ok", ttftMs: 50, streamed: true, usage: { prompt: 48 + 576, completion: 16, cached: 0, cacheReported: true } }, t++);
      const d2 = router.route(g.version, [...turn1, base + 100, base + 101, base + 102], [], t++, undefined, false, undefined, undefined, false, false, undefined, true) as RouteDecision;
      // The engine held all of turn 1: 576 tokens for the photo, not the stand-in's 1,024.
      router.release({ lease: d2.lease, outcome: "ok", ttftMs: 50, streamed: true, usage: { prompt: 96 + 576 + 16, completion: 16, cached: 48 + 576 + 16, cacheReported: true } }, t++);
    }
    const { learned } = router.snapshot()[0] as BackendSnapshot;
    expect(learned.reports.cached).toBeGreaterThan(0);
    expect(learned.kvCapacityBlocks).toBe(configured);
    expect(learned.capacitySteps).toBe(0);
  });

  it("learns no capacity without the engine's cached-token report, and still learns characters per token", () => {
    const b = run(2400, 600, 600, false);
    expect(b.learned.kvCapacityBlocks).toBe(2400);
    expect(b.learned.capacitySteps).toBe(0);
    expect(b.learned.reports).toEqual({ usage: 600, cached: 0 });
    expect(b.learned.prefillTokensPerSec).toBe(10_000);
    expect(b.learned.charsPerToken).toBeCloseTo(4, 1);
  });
});

describe("prefill rate", () => {
  /**
   * A backend prefilling `rate` tokens a second after a fixed 40 ms (the first decode step, the
   * network); about two requests in three wait behind others, longer prompts more often (they
   * come in the opening burst). Most prefills are a turn's few hundred tokens.
   */
  function feed(l: PrefillRateLearner, rate: number, n: number, r: () => number): void {
    for (let i = 0; i < n; i++) {
      const uncached = r() < 0.8 ? 50 + Math.floor(r() * 400) : 1000 + Math.floor(r() * 1000);
      const queued = r() < 0.35 ? 0 : -Math.log(1 - r()) * (uncached > 1000 ? 300 : 100);
      l.observe(uncached, 40 + (uncached / rate) * 1000 + queued);
    }
  }

  it("tracks the marginal rate from 4× too slow and 4× too fast, not the per-request rate a fixed cost and queueing drag down", () => {
    for (const configured of [2500, 40_000]) {
      const l = new PrefillRateLearner(configured);
      feed(l, 10_000, 200, rng(5));
      expect(l.tokensPerSec).toBeGreaterThan(8500);
      expect(l.tokensPerSec).toBeLessThan(11_500);
    }
  });

  it("holds its figure when the prefills are too alike for their TTFTs to tell a rate", () => {
    // A multi-turn workload's later turns (the simulator under bench:routing-feedback's pressured
    // trace): each prefills 40–110 new tokens, ~4 ms at this rate, while where the request lands
    // in the engine's decode steps moves its TTFT by 17 ms either way. No slope is in that.
    const rate = 23_000;
    const l = new PrefillRateLearner(rate);
    const r = rng(3);
    let lowest = rate;
    let highest = rate;
    for (let i = 0; i < 400; i++) {
      const uncached = 40 + Math.floor(r() * 70);
      l.observe(uncached, 42 + (uncached / rate) * 1000 + (r() < 0.5 ? 0 : 17) + 3 * r());
      lowest = Math.min(lowest, l.tokensPerSec);
      highest = Math.max(highest, l.tokensPerSec);
    }
    expect(lowest).toBeGreaterThan(rate / 2);
    expect(highest).toBeLessThan(rate * 2);
  });

  it("learns from the requests that had no prompt work queued ahead of them, not from a burst's waits", () => {
    // A window as bench:routing-feedback's pressured multi-turn trace left one backend (32
    // sessions): 5 first turns of ~3,100 new tokens from the opening burst, 4th to 8th in its
    // queue, so each waited for the prefills ahead of it; then later turns of 40–110 new tokens
    // with nothing ahead, their TTFTs moved ±17 ms by where they fell in the decode steps.
    const rate = 23_000;
    const blockChars = 64;
    const blocksOf = (tokens: number) => (tokens * 4) / blockChars;
    const report = (f: BackendFeedback, tokens: number, ttft: number, ahead: number) =>
      f.report({ usage: { prompt: tokens + 4000, completion: 64, cached: 4000, cacheReported: true }, firstTokenMs: ttft, matched: 0, total: -1, recency: NaN, blockChars, setSize: 0, setCapacity: 1000, aheadBlocks: ahead });
    const learned = (withQueue: boolean): number => {
      const f = new BackendFeedback(1000, rate);
      const r = rng(4);
      let queued = 3 * 3100;
      for (let i = 0; i < 5; i++) {
        const tokens = 3050 + Math.floor(r() * 150);
        report(f, tokens, 42 + ((queued + tokens) / rate) * 1000, withQueue ? blocksOf(queued) : 0);
        queued += tokens;
      }
      for (let i = 0; i < 27; i++) {
        const tokens = 40 + Math.floor(r() * 70);
        report(f, tokens, 42 + (tokens / rate) * 1000 + (r() < 0.5 ? 0 : 17) + 3 * r(), 0);
      }
      return f.snapshot().prefillTokensPerSec;
    };
    // Told what was queued ahead, only the burst's first request and the later turns teach: the rate holds.
    expect(learned(true) / rate).toBeGreaterThan(1 / 1.5);
    expect(learned(true) / rate).toBeLessThan(1.5);
    // Not told, the queue's waits would read as a rate several times too slow (4,699 tokens/s
    // before the learner dropped a TTFT over 6× its prefill at the rate held); now the longest
    // waits are dropped as waits, and what is left cannot tell a slope: the rate holds.
    expect(learned(false) / rate).toBeGreaterThan(1 / 1.5);
  });

  it("takes a TTFT far past its prefill for a wait, even with nothing ahead by the router's count: an overload draining", () => {
    // One backend's reports in llm-d's b2b-saas shape in virtual time (seed 2), as an overload
    // drained: 1,210-token questions under a cached group prompt and two whole 7,210-token
    // prompts, every TTFT mostly a wait in the engine's own queue, which the router's prefill
    // debt does not count (none ahead). The engine prefills 23,810 tokens a second; the slope
    // between the two sizes read 3,685 and moved the group's placement off that backend (kv_hit
    // 0.95 of the ceiling, 0.97 without the rate learned). Only the last few TTFTs are within 6×
    // their prefill (and the first long prompt): five points, under the twelve a fit needs.
    const l = new PrefillRateLearner(23_810);
    const ttfts = [2528, 2477, 2480, 2506, 2212, 2072, 2118, 1955, 2009, 2003, 1819, 1815, 1617, 1559, 1544, 1603, 1296, 1081, 1116, 1032, 982, 1022, 1046, 963, 941, 878, 919, 755, 704, 739, 520, 471, 253, 166, 77, 75];
    l.observe(7211, 394);
    ttfts.forEach((ttft, i) => l.observe(i === 3 ? 7211 : 1210 + (i % 3), ttft));
    expect(l.tokensPerSec).toBe(23_810);
    expect(l.learnedRate).toBeNull();
  });

  it("reads a window of two prompt sizes by each size's least-waited request, not by the few of the rarer size", () => {
    // One backend's first 24 reports in llm-d's b2b-saas shape in virtual time (seed 1, hop 1 ms):
    // 1,210-token questions under a cached group prompt, ~60 ms each when nothing is ahead, and
    // three whole 7,212-token prompts, one prefilled at once (374 ms: 303 of prefill at the engine's
    // 23,810 tokens a second) and two that waited in the engine's queue (561 and 1,211 ms, within
    // 6× their prefill). Every pairwise slope joins a question to a whole prompt, so the median
    // slope was the middle prompt's, as if it had not waited: 14,838 tokens a second was learned.
    const l = new PrefillRateLearner(23_810);
    const window: [number, number][] = [[7212, 374], [7212, 1211], [1211, 209], [7212, 561], [1212, 75], [1212, 60], [1211, 68], [1211, 69], [1211, 120], [1213, 155], [1210, 85], [1211, 70], [1210, 60], [1211, 60], [1211, 66], [1210, 60], [1212, 60], [1213, 70], [1212, 61], [1212, 66], [1209, 66], [1211, 65], [1209, 68], [1212, 68]];
    for (const [tokens, ttft] of window) l.observe(tokens, ttft);
    expect(l.tokensPerSec).toBe(23_810);
  });

  it("is not moved far by one fast outlier, ignores tiny prefills, and stays within 1/16× to 16×", () => {
    const l = new PrefillRateLearner(10_000);
    const r = rng(9);
    feed(l, 10_000, 64, r);
    const before = l.tokensPerSec;
    l.observe(3000, 1);
    feed(l, 10_000, 3, r);
    expect(l.tokensPerSec / before).toBeGreaterThan(0.9);
    expect(l.tokensPerSec / before).toBeLessThan(1.1);
    expect(l.observe(8, 1000)).toBe(false);
    const fast = new PrefillRateLearner(1000);
    for (let i = 0; i < 64; i++) fast.observe(100 + 50 * i, 1 + i * 1e-6);
    expect(fast.tokensPerSec).toBe(16_000);
  });
});

describe("a prefill rate borrowed from the group", () => {
  const rates = (router: GroupRouter) => Object.fromEntries(router.snapshot().map((b) => [b.id, b.learned.prefillTokensPerSec]));
  /** The prompt blocks each backend's queue of prompt work drains in a second: the rate routing acts on, not the one it shows. */
  const drains = (router: GroupRouter, g: ResolvedGroup, at: number) => {
    const ids = g.deployments.map((d) => d.id);
    return Object.fromEntries(
      ids.map((id, i) => {
        const others = ids.filter((x) => x !== id);
        const debt = () => router.snapshot().find((b) => b.id === id)?.prefillDebtBlocks ?? NaN;
        // A prompt far longer than its one-block chain queues work no second can drain; an empty one at the second's end adds none.
        const long = router.route(g.version, [1e9 + i], others, at, undefined, false, 1_000_000) as RouteDecision;
        const queued = debt();
        const empty = router.route(g.version, [], others, at + 1000) as RouteDecision;
        const drained = queued - debt();
        for (const d of [long, empty]) router.release({ lease: d.lease, outcome: "client-abort" }, at + 1000);
        return [id, drained];
      }),
    );
  };

  /** A group of four, b3 configured twice as fast; `teach` runs requests on one backend alone, its TTFT a fixed 40 ms plus its prompt at `rate`. */
  function borrowing(configured = [10_000, 10_000, 10_000, 20_000]) {
    const deploymentsOf = (rates: number[]) => rates.map((rate, i) => ({ id: `b${i}`, baseUrl: `http://127.0.0.1:${9001 + i}`, model: "m", maxInFlight: 1000, prefillTokensPerSec: rate }));
    const deployments = deploymentsOf(configured);
    const version = (rates: number[]): ResolvedGroup => {
      const parsed = parseConfig({ modelGroups: [{ name: "g", strategy: "prefix-aware", deployments: deploymentsOf(rates) }] });
      if (!parsed.ok) throw new Error(parsed.error);
      return parsed.config.groups[0] as ResolvedGroup;
    };
    const g = version(configured);
    const router = new GroupRouter("g", rng(2));
    router.install(g, 0);
    const r = rng(6);
    let now = 0;
    let block = 1;
    const teach = (id: string, rate: number, n: number) => {
      const others = deployments.map((d) => d.id).filter((x) => x !== id);
      for (let i = 0; i < n; i++) {
        const chain = Array.from({ length: 10 + Math.floor(r() * 140) }, () => block++);
        const d = router.route(g.version, chain, others, now) as RouteDecision;
        const prompt = chain.length * 16;
        router.release({ lease: d.lease, outcome: "ok", ttftMs: 40 + (prompt / rate) * 1000, streamed: true, usage: { prompt, completion: 16, cached: 0, cacheReported: true } }, now + 500);
        now += 1000;
      }
    };
    return { g, version, router, teach };
  }

  it("is the others' learned rate over their configured one, times its own configured rate, until it learns its own", () => {
    const { router, teach } = borrowing();
    // Every server is 4× as fast as configured; b0 learns it, the rest borrow it.
    teach("b0", 40_000, 40);
    expect(rates(router)).toEqual({ b0: 40_000, b1: 40_000, b2: 40_000, b3: 80_000 });
    // b1 learns its own, 2×: it keeps it, and the borrowers take the median of 4× and 2×.
    teach("b1", 20_000, 40);
    const both = Math.sqrt(4 * 2);
    expect(rates(router)).toEqual({ b0: 40_000, b1: 20_000, b2: Math.round(10_000 * both), b3: Math.round(20_000 * both) });
  });

  it("is borrowed again after the routing object restarts, from the learned rates it restored", () => {
    const { g, router, teach } = borrowing();
    teach("b0", 40_000, 40);
    const before = { rates: rates(router), drains: drains(router, g, 1e6) };
    expect(before.drains.b1).toBeGreaterThan(10_000 / 16);
    const saved = router.takeAffinityChanges(4096);
    const back = new GroupRouter("g", rng(3));
    back.install(g, 0);
    for (const s of saved) back.restoreAffinity(s.key, s.blocks);
    expect({ rates: rates(back), drains: drains(back, g, 1e6) }).toEqual(before);
  });

  it("follows a config change: a factor of the new configured rates, lent to a backend the change adds", () => {
    const { version, router, teach } = borrowing();
    teach("b0", 40_000, 40);
    // b2 is configured at half its old rate and b3 at twice: each borrows 4× its new figure, and so does b4, new.
    router.install(version([10_000, 10_000, 5_000, 40_000, 8_000]), 1e6);
    expect(rates(router)).toEqual({ b0: 40_000, b1: 40_000, b2: 20_000, b3: 160_000, b4: 32_000 });
    // b0's own figure is now configured at 20,000: it learned 2× that, and so the others borrow 2×.
    router.install(version([20_000, 10_000, 5_000, 40_000, 8_000]), 2e6);
    expect(rates(router)).toEqual({ b0: 40_000, b1: 20_000, b2: 10_000, b3: 80_000, b4: 16_000 });
  });
});

describe("the learned figures in the snapshot", () => {
  it("save after the prefix set's numbers and come back; a snapshot without them restores as before", () => {
    const f = new BackendFeedback(1000, 10_000);
    expect(f.saved()).toEqual([]);
    for (let i = 0; i < 40; i++) {
      // 5,000 prompt tokens a second after a fixed 10 ms.
      const prompt = 500 + 100 * (i % 10);
      f.report({ usage: { prompt, completion: 10, cached: 0, cacheReported: true }, firstTokenMs: 10 + prompt / 5, matched: 200, total: 330, recency: NaN, blockChars: 64, setSize: 1000, setCapacity: 1000, aheadBlocks: 0 });
    }
    const learned = f.snapshot();
    expect(learned.kvCapacityBlocks).toBeLessThan(1000);
    expect(learned.prefillTokensPerSec).toBe(5000);
    const set = [2.5, -1, 2, 11, 12];
    const saved = Float64Array.from([...set, ...f.saved()]);
    const back = new BackendFeedback(1000, 10_000);
    expect(back.restore(saved)).toBe(set.length);
    expect(back.snapshot()).toMatchObject({ charsPerToken: learned.charsPerToken, kvCapacityBlocks: learned.kvCapacityBlocks, prefillTokensPerSec: 5000 });
    const old = new BackendFeedback(1000, 10_000);
    expect(old.restore(Float64Array.from(set))).toBe(set.length);
    expect(old.saved()).toEqual([]);
  });

  it("survives the routing object's restart: the router restores capacity before the prefix set", () => {
    const g = group({ kvCapacityBlocks: 4000 });
    const a = new GroupRouter("g", rng(1));
    a.install(g, 0);
    const chain = Array.from({ length: 300 }, (_, i) => i + 1);
    for (let i = 0; i < 60; i++) {
      const d = a.route(g.version, chain, [], i) as RouteDecision;
      a.release({ lease: d.lease, outcome: "ok", usage: { prompt: 300 * 16, completion: 4, cached: 0, cacheReported: true } }, i);
    }
    const learned = (a.snapshot()[0] as BackendSnapshot).learned.kvCapacityBlocks;
    expect(learned).toBeLessThan(4000);
    const [saved] = a.takeAffinityChanges(4096);
    const b = new GroupRouter("g", rng(1));
    b.install(g, 0);
    expect(b.restoreAffinity(saved?.key ?? "", saved?.blocks ?? new Float64Array())).toBeGreaterThan(0);
    const back = b.snapshot()[0] as BackendSnapshot;
    expect(back.learned.kvCapacityBlocks).toBe(learned);
    expect(back.prefixCapacity).toBe(learned);
  });
});

describe("sampling for feedback", () => {
  it("reads usage on the configured share only, never at 0, and not for a group saved before the setting existed", () => {
    const r = rng(11);
    let n = 0;
    for (let i = 0; i < 10_000; i++) if (sampledForFeedback({ sampleRate: 0.1 }, r)) n++;
    expect(n).toBeGreaterThan(900);
    expect(n).toBeLessThan(1100);
    expect(sampledForFeedback({ sampleRate: 0 }, () => 0)).toBe(false);
    expect(sampledForFeedback(undefined, () => 0)).toBe(false);
    expect(sampledForFeedback({ sampleRate: 1 }, () => 0.999)).toBe(true);
  });
});

/** Fills the backend's prefix set with `n` distinct 10-block prompts, none cached: the state in which more cached than matched votes to grow. The clock after. */
function fillSet(router: GroupRouter, g: ResolvedGroup, n: number, t: number): number {
  for (let i = 0; i < n; i++) {
    const d = router.route(g.version, Array.from({ length: 10 }, (_, k) => 1000 + i * 10 + k), [], t++) as RouteDecision;
    router.release({ lease: d.lease, outcome: "ok", ttftMs: 50, streamed: true, usage: { prompt: 160, completion: 16, cached: 0, cacheReported: true } }, t++);
  }
  return t;
}

function group(deployment: Record<string, unknown>, fields: Record<string, unknown> = {}): ResolvedGroup {
  const r = parseConfig({ modelGroups: [{ name: "g", strategy: "prefix-aware", ...fields, deployments: [{ id: "b0", baseUrl: "http://127.0.0.1:9001", model: "m", maxInFlight: 1000, ...deployment }] }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}
