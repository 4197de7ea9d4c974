import { afterEach, describe, expect, it } from "vitest";
import { costModel, type CostModel } from "../../bench/fleet/cost-model.ts";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { PRESETS } from "../../bench/fleet/presets.ts";
import { BatchScheduler, type Sequence } from "../../bench/fleet/scheduler.ts";
import { readSse } from "../../bench/fleet/sim-client.ts";

interface StepCall {
  uncached: number;
  admitted: number;
  decoding: number;
  running: number;
}

/** Zero-latency steps that record what the scheduler asked the cost model. */
function recordingCost(calls: StepCall[]): CostModel {
  return {
    instant: false,
    stepMs(uncached, admitted, decoding, running) {
      calls.push({ uncached, admitted, decoding, running });
      return 0;
    },
  };
}

interface FakeSeq extends Sequence {
  done: Promise<void>;
}

function fakeSeq(name: string, log: string[], opts: { tokens: number; blocks?: number; uncached?: number; stopAt?: number; priority?: number }): FakeSeq {
  let finished = (): void => {};
  const done = new Promise<void>((resolve) => (finished = resolve));
  return {
    blocksNeeded: opts.blocks ?? 1,
    outputTokens: opts.tokens,
    tokenIntervalMs: 0,
    admit: () => {
      log.push(`${name}:admit`);
      return opts.uncached ?? 10;
    },
    token: (i) => {
      if (opts.stopAt !== undefined && i >= opts.stopAt) {
        log.push(`${name}:stop`);
        finished();
        return false;
      }
      log.push(`${name}${i}`);
      return true;
    },
    finish: () => {
      log.push(`${name}:finish`);
      finished();
    },
    done,
    ...(opts.priority === undefined ? {} : { priority: opts.priority }),
  };
}

describe("BatchScheduler", () => {
  it("queues FIFO beyond maxNumSeqs", async () => {
    const log: string[] = [];
    const s = new BatchScheduler(recordingCost([]), { maxNumSeqs: 1, kvCapacityBlocks: 100, maxNumBatchedTokens: 4096 });
    const a = fakeSeq("a", log, { tokens: 3 });
    const b = fakeSeq("b", log, { tokens: 2 });
    s.submit(a);
    s.submit(b);
    expect(s.waiting).toBe(2);
    await Promise.all([a.done, b.done]);
    expect(log).toEqual(["a:admit", "a0", "a1", "a2", "a:finish", "b:admit", "b0", "b1", "b:finish"]);
    expect(s.running).toBe(0);
    expect(s.waiting).toBe(0);
  });

  it("admits waiting sequences by priority, lower first and in arrival order within one, under the priority policy; fcfs ignores it", async () => {
    const order = async (policy: "fcfs" | "priority"): Promise<string[]> => {
      const log: string[] = [];
      const s = new BatchScheduler(recordingCost([]), { maxNumSeqs: 1, kvCapacityBlocks: 100, maxNumBatchedTokens: 4096 }, policy);
      // The first is admitted at once (nothing runs); the rest wait, and the policy orders them.
      const seqs = [fakeSeq("a", log, { tokens: 1, priority: 9 }), fakeSeq("b", log, { tokens: 1, priority: 5 }), fakeSeq("c", log, { tokens: 1, priority: 1 }), fakeSeq("d", log, { tokens: 1, priority: 5 }), fakeSeq("e", log, { tokens: 1 })];
      s.submit(seqs[0] as FakeSeq);
      await new Promise((r) => setImmediate(r));
      for (const q of seqs.slice(1)) s.submit(q);
      await Promise.all(seqs.map((q) => q.done));
      return log.filter((l) => l.endsWith(":admit")).map((l) => l.slice(0, 1));
    };
    expect(await order("priority")).toEqual(["a", "e", "c", "b", "d"]);
    expect(await order("fcfs")).toEqual(["a", "b", "c", "d", "e"]);
  });

  it("decodes running sequences together, one token each per step", async () => {
    const log: string[] = [];
    const calls: StepCall[] = [];
    const s = new BatchScheduler(recordingCost(calls), { maxNumSeqs: 8, kvCapacityBlocks: 100, maxNumBatchedTokens: 4096 });
    const a = fakeSeq("a", log, { tokens: 3, uncached: 30 });
    const b = fakeSeq("b", log, { tokens: 3, uncached: 12 });
    s.submit(a);
    s.submit(b);
    await Promise.all([a.done, b.done]);
    expect(log).toEqual(["a:admit", "b:admit", "a0", "b0", "a1", "b1", "a2", "a:finish", "b2", "b:finish"]);
    // One prefill step for both, then decode steps for the two of them.
    expect(calls[0]).toEqual({ uncached: 42, admitted: 2, decoding: 0, running: 2 });
    expect(calls[1]).toEqual({ uncached: 0, admitted: 0, decoding: 2, running: 2 });
  });

  it("chunks prefill to the step's token budget, decode tokens first, prompts in arrival order", async () => {
    const log: string[] = [];
    const calls: StepCall[] = [];
    const s = new BatchScheduler(recordingCost(calls), { maxNumSeqs: 8, kvCapacityBlocks: 100, maxNumBatchedTokens: 100 });
    const a = fakeSeq("a", log, { tokens: 4, uncached: 150 });
    const b = fakeSeq("b", log, { tokens: 2, uncached: 60 });
    s.submit(a);
    s.submit(b);
    await Promise.all([a.done, b.done]);
    // Step 1: a's first 100 tokens fill the budget, b waits. Step 2: a's last 50 and b's first 50.
    // Step 3: a decodes (1 token of budget), b's last 10. Then both decode.
    expect(calls.slice(0, 4)).toEqual([
      { uncached: 100, admitted: 1, decoding: 0, running: 1 },
      { uncached: 100, admitted: 2, decoding: 0, running: 2 },
      { uncached: 10, admitted: 1, decoding: 1, running: 2 },
      { uncached: 0, admitted: 0, decoding: 2, running: 2 },
    ]);
    // a's first token comes when its prompt is done (step 2), b's one step later.
    expect(log).toEqual(["a:admit", "b:admit", "a0", "a1", "b0", "a2", "b1", "b:finish", "a3", "a:finish"]);
  });

  it("admits only what fits in the KV cache, but runs an oversized sequence alone", async () => {
    const log: string[] = [];
    const s = new BatchScheduler(recordingCost([]), { maxNumSeqs: 8, kvCapacityBlocks: 10, maxNumBatchedTokens: 4096 });
    const a = fakeSeq("a", log, { tokens: 2, blocks: 8 });
    const b = fakeSeq("b", log, { tokens: 1, blocks: 8 });
    const huge = fakeSeq("h", log, { tokens: 1, blocks: 50 });
    s.submit(a);
    s.submit(b);
    s.submit(huge);
    await Promise.all([a.done, b.done, huge.done]);
    expect(log.indexOf("b:admit")).toBeGreaterThan(log.indexOf("a:finish"));
    expect(log.indexOf("h:admit")).toBeGreaterThan(log.indexOf("b:finish"));
    expect(s.blocksInUse).toBe(0);
  });

  it("drops cancelled sequences, waiting or running, and stops one that refuses tokens", async () => {
    const log: string[] = [];
    const s = new BatchScheduler(recordingCost([]), { maxNumSeqs: 1, kvCapacityBlocks: 100, maxNumBatchedTokens: 4096 });
    const a = fakeSeq("a", log, { tokens: 5, stopAt: 2 });
    const b = fakeSeq("b", log, { tokens: 2 });
    const c = fakeSeq("c", log, { tokens: 1 });
    s.submit(a);
    s.submit(b).cancel();
    s.submit(c);
    await Promise.all([a.done, c.done]);
    expect(log).toEqual(["a:admit", "a0", "a1", "a:stop", "c:admit", "c0", "c:finish"]);
  });
});

describe("cost model", () => {
  const a100 = PRESETS["a100-7b"];

  it("prices prefill by uncached tokens and decode by batch size", () => {
    const cost = costModel(a100, 1);
    expect(cost.stepMs(1000, 1, 0, 1)).toBeCloseTo(a100.prefillBaseMs + 1000 * a100.prefillMsPerToken);
    expect(cost.stepMs(0, 0, 1, 1)).toBeCloseTo(a100.decodeStepMs);
    expect(cost.stepMs(0, 0, 11, 11)).toBeCloseTo(a100.decodeStepMs * (1 + 10 * a100.batchSlowdown));
    expect(costModel(a100, 2).stepMs(0, 0, 1, 1)).toBeCloseTo(2 * a100.decodeStepMs);
  });

  it("is instant for the instant preset", () => {
    const cost = costModel(PRESETS.instant, 1);
    expect(cost.instant).toBe(true);
    expect(cost.stepMs(5000, 3, 10, 13)).toBe(0);
  });

  it("derives a smaller KV cache and slower steps for the L4 than for the A100", () => {
    const l4 = PRESETS["l4-7b"];
    expect(l4.kvCapacityBlocks).toBeLessThan(a100.kvCapacityBlocks);
    // Both must hold one full-length sequence, or vLLM would refuse to start.
    expect(l4.kvCapacityBlocks * 16).toBeGreaterThanOrEqual(l4.maxModelLen);
    expect(l4.decodeStepMs).toBeGreaterThan(a100.decodeStepMs);
    expect(l4.prefillMsPerToken).toBeGreaterThan(a100.prefillMsPerToken);
  });
});

describe("a GPU preset over HTTP", () => {
  let fleet: Fleet | undefined;
  afterEach(async () => {
    await fleet?.close();
    fleet = undefined;
  });

  it("streams tokens as decode steps produce them, and queues beyond maxNumSeqs", async () => {
    fleet = await startFleet({ workers: 1, basePort: 0, preset: "a100-7b", maxNumSeqs: 1 });
    const url = `${fleet.urls[0]}/v1/chat/completions`;
    const req = (content: string): Record<string, unknown> => ({ messages: [{ role: "user", content }], max_tokens: 6, stream: true });
    const [first, second] = await Promise.all([readSse(url, req("first")), readSse(url, req("second"))]);
    for (const read of [first, second]) {
      expect(read.ended).toBe("done");
      // Events were written as produced: the first came well before [DONE].
      expect((read.events.at(-1)?.at ?? 0) - (read.events[0]?.at ?? 0)).toBeGreaterThan(0);
    }
    // One seat: one request finished before the other started.
    const [early, late] = (first.events[0]?.at ?? 0) < (second.events[0]?.at ?? 0) ? [first, second] : [second, first];
    expect(late.events[0]?.at ?? 0).toBeGreaterThanOrEqual(early.events.at(-1)?.at ?? Infinity);
  });
});
