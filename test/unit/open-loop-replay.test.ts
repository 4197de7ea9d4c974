import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { replayOpenLoop, summarizeOpenLoop } from "../../bench/replay/index.ts";
import { atSpeed, ceilingPerRequest, mooncakeTrace, prefixCeiling, type TimedRequest, type TimedTrace } from "../../bench/traces/index.ts";
import { renderChat } from "../../bench/fleet/prompt-render.ts";
import { BlockText } from "../../bench/traces/block-text.ts";
import { useFleets } from "../support/fleets.ts";
import { startHeldUpstream, type HeldUpstream } from "../support/held-upstream.ts";

const fleetOf = useFleets();
const MODEL = "kvgate-sim";
const upstreams: HeldUpstream[] = [];
afterEach(async () => {
  await Promise.all(upstreams.splice(0).map((u) => u.close()));
});

async function heldUpstream(): Promise<HeldUpstream> {
  const upstream = await startHeldUpstream();
  upstreams.push(upstream);
  return upstream;
}

/** Requests named r0, r1, …; `after` gives each one's earlier turn. */
function trace(after: (number | null)[]): TimedTrace {
  const requests: TimedRequest[] = after.map((a, i) => ({
    id: `r${i}`,
    atMs: 0,
    after: a,
    maxTokens: 4,
    promptTokens: 8,
    blocks: [i],
    messages: () => [{ role: "user", content: `r${i}` }],
  }));
  return { kind: "mooncake", params: {}, blockTokens: 16, requests };
}

describe("the simulator's cache lines up with rendered trace blocks", () => {
  it("caches exactly the prompt up to where two requests' block ids part: whole simulator blocks", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const client = new OpenAI({ baseURL: `${fleet.urls[0]}/v1`, apiKey: "unused" });
    const text = new BlockText();
    const cached = async (ids: number[], tokens: number): Promise<number | undefined> => {
      const answer = await client.chat.completions.create({ model: MODEL, max_tokens: 1, messages: [{ role: "user", content: text.prompt(ids, tokens) }] });
      return answer.usage?.prompt_tokens_details?.cached_tokens;
    };
    // Bytes before trace block 0 in the rendered prompt: the template's user tag, then the header.
    const rendered = renderChat({ messages: [{ role: "user", content: text.prompt([46], 100) }] });
    const head = "text" in rendered ? rendered.text.indexOf(text.block(46).slice(0, 400)) : NaN;
    expect(head % 64).toBe(0);
    const shared = (blocks: number): number => (head + blocks * 2048) / 4;

    expect(await cached([46, 47, 48, 2353], 1900)).toBe(0);
    // Shares 3 full blocks with the first: every token up to their end, not one more or less.
    expect(await cached([46, 47, 48, 2366], 1700)).toBe(shared(3));
    // Shares 2: the first two; its partial third block differs from both.
    expect(await cached([46, 47, 99], 1100)).toBe(shared(2));
    // Another first block: not even the header is shared.
    expect(await cached([7, 47, 48], 1500)).toBe(0);
  });
});

describe("open-loop replay against a fleet worker", () => {
  it("replays a Mooncake slice at its timestamps × speed: every request answered, cached tokens as the trace shares them", async () => {
    const fleet = await fleetOf({ workers: 1, maxModelLen: 262_144 });
    const slice = mooncakeTrace({ file: "synthetic", fromMinutes: 8, minutes: 1 });
    // 60 requests over 13 s of the trace, replayed 50 times faster than recorded.
    const small: TimedTrace = { ...slice, requests: slice.requests.slice(0, 60) };
    const arrivalsMs = atSpeed(small.requests.map((r) => r.atMs), 50);
    const result = await replayOpenLoop(small, { baseUrl: fleet.urls[0] ?? "", model: MODEL, arrivalsMs });
    const ceiling = prefixCeiling(small);
    const summary = summarizeOpenLoop(result, { kvCeiling: ceilingPerRequest(small) });

    expect(summary).toMatchObject({ requests: 60, sent: 60, completed: 60, errors: 0, overflow: 0, cut: 0, kv_ceiling: ceiling.kvHit });
    const firstBlocks = new Set<number>();
    let expected = 0;
    for (const r of result.requests) {
      const request = small.requests[r.index];
      expect(r.sentMs ?? -1).toBeGreaterThanOrEqual(r.scheduledMs);
      expect(r.completionTokens).toBe(request?.maxTokens);
      // The template and the header: 22 simulator tokens beyond the trace's.
      expect(r.promptTokens).toBe((request?.promptTokens ?? 0) + 22);
      // What the ideal cache holds of it, plus the header's block when its first block came before.
      const first = request?.blocks[0] ?? -1;
      expected += (ceiling.perRequest[r.index] ?? 0) + (firstBlocks.has(first) ? 16 : 0);
      firstBlocks.add(first);
    }
    // One worker with room for everything is that ideal cache, to a 16-token block per request
    // (a partial last block is cached in whole simulator blocks, and never its last token).
    const cached = result.requests.reduce((sum, r) => sum + (r.cachedTokens ?? 0), 0);
    expect(expected).toBeGreaterThan(20_000);
    expect(Math.abs(cached - expected)).toBeLessThanOrEqual(16 * 60);
  }, 30_000);

  it("samples the workers' queues: requests beyond the seats wait, and their wait is counted", async () => {
    const fleet = await fleetOf({ workers: 1, preset: "a100-7b", maxNumSeqs: 1, timeScale: 0.05 });
    const five: TimedTrace = {
      ...trace([null, null, null, null, null]),
      requests: trace([null, null, null, null, null]).requests.map((r) => ({ ...r, maxTokens: 200 })),
    };
    const result = await replayOpenLoop(five, { baseUrl: fleet.urls[0] ?? "", model: MODEL, arrivalsMs: [0, 0, 0, 0, 0], metricsUrls: fleet.urls, metricsIntervalMs: 10 });
    const server = summarizeOpenLoop(result).queueing.server;
    // One seat, five requests of ~90 ms each at once: up to four wait, for ~90–360 ms.
    expect(server?.waiting.max).toBeGreaterThanOrEqual(2);
    expect(server?.running.max).toBe(1);
    expect(server?.mean_wait_ms ?? 0).toBeGreaterThan(0);
    expect(server?.failed_reads).toBe(0);
  }, 30_000);
});

describe("open-loop replay's bounds and turn order, against an upstream that answers when told", () => {
  it("does not wait for earlier answers, and counts what arrives past the in-flight cap as overflow", async () => {
    const upstream = await heldUpstream();
    const run = replayOpenLoop(trace(Array.from({ length: 10 }, () => null)), {
      baseUrl: upstream.url,
      model: MODEL,
      arrivalsMs: Array.from({ length: 10 }, () => 0),
      maxInFlight: 3,
    });
    await upstream.receivedAtLeast(3);
    expect(upstream.open).toBe(3);
    upstream.release();
    const result = await run;
    expect(upstream.received).toHaveLength(3);
    expect(result.requests.map((r) => r.outcome)).toEqual(["sent", "sent", "sent", ...Array.from({ length: 7 }, () => "overflow")]);
    const summary = summarizeOpenLoop(result, { sloTtftMs: 60_000 });
    expect(summary).toMatchObject({ requests: 10, sent: 3, completed: 3, overflow: 7 });
    expect(summary.goodput.share).toBeCloseTo(0.3, 12);
  });

  it("sends a follow-up only after the answer to the turn it follows, and independent requests meanwhile", async () => {
    const upstream = await heldUpstream();
    const run = replayOpenLoop(trace([null, 0, null]), { baseUrl: upstream.url, model: MODEL, arrivalsMs: [0, 0, 0] });
    await upstream.receivedAtLeast(2);
    expect(upstream.received).toEqual(["r0", "r2"]);
    upstream.release(1);
    await upstream.receivedAtLeast(3);
    expect(upstream.received).toEqual(["r0", "r2", "r1"]);
    upstream.release();
    const result = await run;
    const [first, follow] = result.requests;
    expect(follow?.readyMs).toBeGreaterThanOrEqual((first?.sentMs ?? 0) + (first?.totalMs ?? 0) - 1);
    expect(follow?.turn).toBe(1);
    expect(summarizeOpenLoop(result).queueing.held_for_previous_turn).toBe(1);
  });

  it("cuts what is due after the maximum duration without waiting for it", async () => {
    const upstream = await heldUpstream();
    const run = replayOpenLoop(trace([null, null, 0]), { baseUrl: upstream.url, model: MODEL, arrivalsMs: [0, 3_600_000, 3_600_000], maxDurationMs: 60_000 });
    await upstream.receivedAtLeast(1);
    upstream.release();
    const result = await run;
    expect(result.requests.map((r) => r.outcome)).toEqual(["sent", "cut", "cut"]);
    expect(result.wallMs).toBeLessThan(60_000);
  });

  it("rejects a schedule that does not fit the trace", async () => {
    await expect(replayOpenLoop(trace([null, null]), { baseUrl: "http://127.0.0.1:9", model: MODEL, arrivalsMs: [0] })).rejects.toThrow(RangeError);
    await expect(replayOpenLoop(trace([null, null]), { baseUrl: "http://127.0.0.1:9", model: MODEL, arrivalsMs: [5, 0] })).rejects.toThrow(RangeError);
    await expect(replayOpenLoop(trace([1, null]), { baseUrl: "http://127.0.0.1:9", model: MODEL, arrivalsMs: [0, 0] })).rejects.toThrow(RangeError);
  });
});
