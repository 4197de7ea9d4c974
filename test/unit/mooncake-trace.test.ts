import { describe, expect, it } from "vitest";
import { inferFollowUps, mooncakeRows } from "../../bench/traces/kinds/mooncake.ts";
import { BlockText, PROMPT_OVERHEAD_TOKENS, TRACE_BLOCK_TOKENS } from "../../bench/traces/block-text.ts";
import { hitConcentration, mooncakeTrace, pooledLruHit, prefixCeiling, type TimedTrace } from "../../bench/traces/index.ts";
import { shardCeiling } from "../../bench/traces/shard-ceiling.ts";

const content = (trace: TimedTrace, i: number): string => trace.requests[i]?.messages()[0]?.content ?? "";

describe("the committed Mooncake traces", () => {
  it("are the published files, whole: 12,031 and 3,993 requests", () => {
    expect(mooncakeRows("conversation")).toHaveLength(12_031);
    expect(mooncakeRows("synthetic")).toHaveLength(3_993);
  });

  it("reproduce the README's ideal-cache figures: 0.374 conversation, 0.651 synthetic", () => {
    expect(prefixCeiling(mooncakeTrace({ file: "conversation" })).kvHit).toBeCloseTo(0.374, 3);
    expect(prefixCeiling(mooncakeTrace({ file: "synthetic" })).kvHit).toBeCloseTo(0.651, 3);
  });

  it("count a partial last block by its own tokens, and only leading blocks seen before", () => {
    const request = (blocks: number[], promptTokens: number) => ({ id: "r", atMs: 0, after: null, maxTokens: 1, promptTokens, blocks, messages: () => [] });
    const ceiling = prefixCeiling({
      blockTokens: 512,
      requests: [request([1, 2], 700), request([1, 2], 600), request([9, 2], 1024), request([1, 3, 4], 1100)],
    });
    // 2nd: both blocks seen, the second partial (88 tokens); 3rd: block 9 is new, so nothing; 4th: block 1 only.
    expect(ceiling.perRequest).toEqual([0, 600, 0, 512]);
    expect(ceiling.kvHit).toBeCloseTo(1112 / 3424, 12);
  });
});

describe("a slice", () => {
  it("keeps the requests that arrive in it, times counted from its start", () => {
    const trace = mooncakeTrace({ file: "conversation", fromMinutes: 10, minutes: 5 });
    const rows = mooncakeRows("conversation").filter((r) => r.timestamp >= 600_000 && r.timestamp < 900_000);
    expect(trace.requests).toHaveLength(rows.length);
    expect(trace.requests[0]?.atMs).toBe((rows[0]?.timestamp ?? 0) - 600_000);
    expect(trace.requests.every((r, i) => r.atMs >= (trace.requests[i - 1]?.atMs ?? 0) && r.atMs < 300_000)).toBe(true);
    expect(trace.requests[0]?.id).toBe(`mooncake-conversation-${rows[0]?.line}`);
  });

  it("leaves out requests longer than the fleet's context when asked, and counts them", () => {
    const all = mooncakeTrace({ file: "conversation", minutes: 10 });
    const fits = mooncakeTrace({ file: "conversation", minutes: 10, maxModelLen: 32_768 });
    const tooLong = all.requests.filter((r) => r.promptTokens + PROMPT_OVERHEAD_TOKENS + r.maxTokens > 32_768).length;
    expect(tooLong).toBeGreaterThan(0);
    expect(fits.requests).toHaveLength(all.requests.length - tooLong);
    expect(fits.params.tooLong).toBe(tooLong);
  });

  it("rejects a bad slice", () => {
    expect(() => mooncakeTrace({ file: "synthetic", minutes: 0 })).toThrow(RangeError);
    expect(() => mooncakeTrace({ file: "synthetic", fromMinutes: -1 })).toThrow(RangeError);
  });
});

describe("rendering block ids as text", () => {
  const text = new BlockText();

  it("gives a block the same 2,048 bytes every time, and other blocks other bytes from their start", () => {
    const a = text.block(46);
    expect(a).toHaveLength(TRACE_BLOCK_TOKENS * 4);
    expect(new BlockText().block(46)).toBe(a);
    expect(text.block(47).slice(0, 64)).not.toBe(a.slice(0, 64));
    expect(a).toMatch(/^[\x20-\x7e\n]+$/);
  });

  it("makes prompts with equal leading ids byte-equal up to where their ids part, and cuts the last block to length", () => {
    const a = text.prompt([46, 47, 48, 2353], 1600);
    const b = text.prompt([46, 47, 48, 2366], 1700);
    const c = text.prompt([46, 47, 99], 1200);
    const header = a.length - 1600 * 4;
    expect(header).toBe(b.length - 1700 * 4);
    expect(a.slice(0, header + 3 * 2048)).toBe(b.slice(0, header + 3 * 2048));
    expect(a.slice(header + 3 * 2048, header + 3 * 2048 + 64)).not.toBe(b.slice(header + 3 * 2048, header + 3 * 2048 + 64));
    expect(c.slice(0, header + 2 * 2048)).toBe(a.slice(0, header + 2 * 2048));
    expect(c.slice(header + 2 * 2048, header + 2 * 2048 + 64)).not.toBe(a.slice(header + 2 * 2048, header + 2 * 2048 + 64));
    // The last block is the head of the block's full text.
    expect(text.prompt([46, 47, 48, 2353], 3 * 512 + 10).endsWith(text.block(2353).slice(0, 40))).toBe(true);
  });

  it("renders a trace request from its own ids and length: a fixed header, then 4 bytes a token", () => {
    const trace = mooncakeTrace({ file: "conversation", minutes: 1 });
    const headers = [0, 3, 17].map((i) => {
      const request = trace.requests[i];
      expect(content(trace, i)).toBe(new BlockText().prompt(request?.blocks ?? [], request?.promptTokens ?? 0));
      return content(trace, i).length - (request?.promptTokens ?? 0) * 4;
    });
    expect(new Set(headers).size).toBe(1);
    expect(headers[0]).toBeGreaterThan(0);
  });
});

describe("conversation turns in the synthetic trace", () => {
  it("a request that extends an earlier prompt's full blocks with room for its answer follows it; a sibling question does not", () => {
    const rows = [
      { inputLength: 1100, outputLength: 50, hashIds: [1, 2, 3] }, // turn 1: 2 full blocks + 76 tokens
      { inputLength: 1120, outputLength: 40, hashIds: [1, 2, 4] }, // another question on the same document: no room for turn 1's answer
      { inputLength: 1300, outputLength: 30, hashIds: [1, 2, 5] }, // a next turn: of the two it could follow, the latest
      { inputLength: 2000, outputLength: 30, hashIds: [7, 8, 9, 10] }, // unrelated
      { inputLength: 1600, outputLength: 10, hashIds: [1, 2, 6, 11] }, // the turn after (1,600 ≥ 1,300 + 30)
    ];
    expect(inferFollowUps(rows)).toEqual([null, null, 1, null, 2]);
  });

  it("finds 421 follow-ups in the synthetic trace, and holds none in the conversation trace by default", () => {
    const synthetic = mooncakeTrace({ file: "synthetic" });
    expect(synthetic.params.followUpRequests).toBe(421);
    for (const [i, r] of synthetic.requests.entries()) {
      if (r.after === null) continue;
      const before = synthetic.requests[r.after];
      expect(r.after).toBeLessThan(i);
      expect(r.promptTokens).toBeGreaterThanOrEqual((before?.promptTokens ?? 0) + (before?.maxTokens ?? 0));
    }
    expect(mooncakeTrace({ file: "conversation", minutes: 10 }).requests.every((r) => r.after === null)).toBe(true);
  });
});

describe("how concentrated a trace's hits are", () => {
  it("gives the share of the cached tokens its largest hits carry, in any order of requests", () => {
    expect(hitConcentration([10, 0, 60, 30], [1, 2, 10])).toEqual([0.6, 0.9, 1]);
  });

  it("is null where nothing is cached", () => {
    expect(hitConcentration([0, 0], [5])).toEqual([null]);
  });
});

describe("the prefix ceiling over shards", () => {
  const slice = mooncakeTrace({ file: "conversation", fromMinutes: 30, minutes: 1 });

  it("is the one-cache ceiling over one shard, and never above it over more", () => {
    const one = prefixCeiling(slice).kvHit as number;
    expect(shardCeiling(slice, 4, 1).kvHit).toBeCloseTo(one, 12);
    for (const shards of [2, 3, 4]) expect(shardCeiling(slice, 4, shards).kvHit).toBeLessThanOrEqual(one);
  });

  it("spreads conversations over the shards by their key, each conversation's turns on one shard: nothing lost", () => {
    // 40 conversations with their own first message; turn k is turn k−1 with one more exchange.
    let block = 0;
    const requests = [];
    for (let c = 0; c < 40; c++) {
      const blocks: number[] = [];
      for (let k = 1; k <= 4; k++) {
        blocks.push(++block);
        const upTo = k;
        requests.push({
          id: `c${c}t${k}`,
          atMs: requests.length,
          after: null,
          maxTokens: 1,
          promptTokens: 512 * k,
          blocks: [...blocks],
          messages: () => Array.from({ length: upTo }, (_, i) => ({ role: "user" as const, content: `conversation ${c} question ${i} `.repeat(30) })),
        });
      }
    }
    const trace = { blockTokens: 512, requests };
    const over = shardCeiling(trace, 4, 4);
    expect(over.requests.every((n) => n >= 20)).toBe(true);
    expect(over.kvHit).toBeCloseTo(prefixCeiling(trace).kvHit as number, 12);
  });
});

describe("one LRU cache holding a fleet's memory", () => {
  const request = (blocks: number[]) => ({ id: "r", atMs: 0, after: null, maxTokens: 1, promptTokens: blocks.length * 512, blocks, messages: () => [] });

  it("is the prefix ceiling while everything fits", () => {
    const trace = { blockTokens: 512, requests: [request([1, 2, 3]), request([1, 2, 4]), request([1, 2, 3, 5])] };
    expect(pooledLruHit(trace, 512 * 100)).toBeCloseTo(prefixCeiling(trace).kvHit as number, 12);
  });

  it("counts a partial last block by its own tokens", () => {
    const partial = { blockTokens: 512, requests: [request([1, 2]), { ...request([1, 2]), promptTokens: 600 }] };
    expect(pooledLruHit(partial, 512 * 100)).toBeCloseTo(600 / 1624, 12);
  });

  it("evicts the least recently used block, a prefix from its end", () => {
    // Room for 3 blocks. [1,2,3] then [7]: block 3, the prefix's end, goes; [1,2] still hit.
    const tail = { blockTokens: 512, requests: [request([1, 2, 3]), request([7]), request([1, 2, 3])] };
    expect(pooledLruHit(tail, 512 * 3)).toBeCloseTo(1024 / (512 * 7), 12);
    // [1,2] then [3,4] then [5]: 1 and 2 are the oldest and both go; [1,2] misses entirely.
    const old = { blockTokens: 512, requests: [request([1, 2]), request([3, 4]), request([5]), request([1, 2])] };
    expect(pooledLruHit(old, 512 * 3)).toBe(0);
  });
});
