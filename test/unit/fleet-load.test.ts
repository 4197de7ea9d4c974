import { describe, expect, it } from "vitest";
import { resolveFleetOptions } from "../../bench/fleet/index.ts";
import { profileOf } from "../../bench/fleet/options.ts";
import type { GpuProfile } from "../../bench/fleet/presets.ts";
import {
  LLMD_SATURATED_RPS,
  LLMD_STAGES,
  b2bSaasRateScale,
  b2bSaasTrace,
  fleetBusyMs,
  loadAtSpeed,
  mooncakeTrace,
  prefixCeiling,
  rateForLoad,
  speedForLoad,
  traceDemand,
  type TimedTrace,
} from "../../bench/traces/index.ts";

const PROFILE: GpuProfile = {
  kvCapacityBlocks: 1000,
  maxNumSeqs: 4,
  maxNumBatchedTokens: 104,
  maxModelLen: 100_000,
  prefillBaseMs: 10,
  prefillMsPerToken: 1,
  decodeStepMs: 20,
  batchSlowdown: 0.5,
};

/** Two requests 10 s apart, 200 prompt tokens each in unshared 16-token blocks, 16 output tokens. */
const TWO: TimedTrace = {
  kind: "mooncake",
  params: {},
  blockTokens: 16,
  requests: [0, 10_000].map((atMs, r) => ({
    id: `r${r}`,
    atMs,
    after: null,
    maxTokens: 16,
    promptTokens: 200,
    blocks: Array.from({ length: 13 }, (_, b) => r * 100 + b),
    messages: () => [],
  })),
};

describe("a trace's load on a fleet", () => {
  it("is its engine steps at saturation over the fleet's time: prefill in full steps, the decode the prefill steps leave", () => {
    const demand = traceDemand(TWO);
    expect(demand).toEqual({ requests: 2, prefillTokens: 400, outputTokens: 32, meanBlocks: 14, spanMs: 10_000 });
    // 4 sequences run (the seat limit; the KV fits 71); a step prefills 100 tokens and decodes 4:
    // 4 mixed steps of 10 + 100 + 20 × (1 + 0.5 × 3) = 160 ms decode 16 tokens, 4 decode-only steps of 50 ms the other 16.
    expect(fleetBusyMs(demand, { profile: PROFILE, workers: 1 })).toBeCloseTo(840, 9);
    expect(loadAtSpeed(demand, { profile: PROFILE, workers: 1 }, 1)).toBeCloseTo(0.084, 9);
    expect(loadAtSpeed(demand, { profile: PROFILE, workers: 2 }, 4)).toBeCloseTo(0.168, 9);
    expect(speedForLoad(demand, { profile: PROFILE, workers: 1 }, 0.84)).toBeCloseTo(10, 9);
    expect(rateForLoad(demand, { profile: PROFILE, workers: 1 }, 1)).toBeCloseTo(2000 / 840, 9);
  });

  it("runs fewer sequences when their KV blocks fill the cache", () => {
    // 14 blocks a request, 28 in the cache: 2 run; a step prefills 102 tokens, decode(2) = 30 ms.
    const demand = traceDemand(TWO);
    const busy = fleetBusyMs(demand, { profile: { ...PROFILE, kvCapacityBlocks: 28 }, workers: 1 });
    const mixed = 400 / 102;
    expect(busy).toBeCloseTo(mixed * (10 + 102 + 30) + ((32 - mixed * 2) / 2) * 30, 9);
  });

  it("prefills only what the ideal cache misses, or everything with no cache", () => {
    const [first] = TWO.requests;
    if (!first) throw new Error("no request");
    const repeat: TimedTrace = { ...TWO, requests: [first, { ...first, id: "again", atMs: 5000 }] };
    expect(traceDemand(repeat).prefillTokens).toBe(200);
    expect(traceDemand(repeat, "none").prefillTokens).toBe(400);
  });

  it("puts the Mooncake conversation slice's first 10 minutes near 80% of 4 a100-7b workers at speed 1", () => {
    const fleet = { profile: profileOf(resolveFleetOptions({ preset: "a100-7b" })), workers: 4 };
    const trace = mooncakeTrace({ file: "conversation", minutes: 10 });
    const load = loadAtSpeed(traceDemand(trace), fleet, 1);
    expect(load).toBeGreaterThan(0.6);
    expect(load).toBeLessThan(0.95);
    const speed = speedForLoad(traceDemand(trace), fleet, 0.8);
    expect(loadAtSpeed(traceDemand(trace), fleet, speed)).toBeCloseTo(0.8, 9);
    // A time scale of 0.2 makes the GPUs 5 times faster: 5 times the speed for the same load.
    const fast = { profile: profileOf(resolveFleetOptions({ preset: "a100-7b", timeScale: 0.2 })), workers: 4 };
    expect(speedForLoad(traceDemand(trace), fast, 0.8) / speed).toBeCloseTo(5, 6);
  });
});

describe("the b2b-saas workload", () => {
  const trace = b2bSaasTrace();

  it("has llm-d's shape: 150 groups × 5 prompts of a 6,000-token system prompt and a 1,200-token question, 1,000-token answers", () => {
    const first = trace.requests.slice(0, 750);
    expect(new Set(first.map((r) => r.id.replace(/^b2b-saas-\d+-/, ""))).size).toBe(750);
    expect(new Set(first.map((r) => r.id.replace(/^b2b-saas-\d+-(g\d+)-q\d+$/, "$1"))).size).toBe(150);
    for (const r of first) {
      expect(r.maxTokens).toBe(1000);
      // Simulator tokens: both texts and the chat template's tags.
      expect(r.promptTokens).toBeGreaterThan(7150);
      expect(r.promptTokens).toBeLessThan(7250);
    }
    const [system, user] = first[0]?.messages() ?? [];
    expect(system?.role).toBe("system");
    expect(user?.role).toBe("user");
    expect((system?.content.length ?? 0) / 4).toBeCloseTo(6000, -1);
    expect((user?.content.length ?? 0) / 4).toBeCloseTo(1200, -1);
  });

  it("sends the shuffled prompts round and round, so a prompt comes back whole every 750 requests", () => {
    const prompt = (k: number): string => trace.requests[k]?.id.replace(/^b2b-saas-\d+-/, "") ?? "";
    expect(prompt(750)).toBe(prompt(0));
    expect(prompt(1600)).toBe(prompt(100));
    expect(trace.requests[750]?.messages()).toEqual(trace.requests[0]?.messages());
    expect(prefixCeiling(trace).kvHit).toBeGreaterThan(0.95);
  });

  it("ramps Poisson arrivals through llm-d's 17 stages; rateScale only compresses or stretches time", () => {
    const expected = LLMD_STAGES.reduce((n, s) => n + s.ratePerSec * s.durationS, 0);
    expect(Math.abs(trace.requests.length - expected)).toBeLessThan(4 * Math.sqrt(expected));
    expect(trace.requests.at(-1)?.atMs).toBeLessThan(LLMD_STAGES.reduce((t, s) => t + s.durationS, 0) * 1000);
    const fast = b2bSaasTrace({ rateScale: 2, stages: 3 });
    const slow = b2bSaasTrace({ stages: 3 });
    expect(fast.requests.map((r) => r.id)).toEqual(slow.requests.map((r) => r.id));
    fast.requests.forEach((r, i) => expect(r.atMs).toBeCloseTo((slow.requests[i]?.atMs ?? 0) / 2, 6));
    expect(() => b2bSaasTrace({ stages: 18 })).toThrow(RangeError);
    expect(() => b2bSaasTrace({ groups: 0 })).toThrow(RangeError);
  });

  it("scales the ramp to a fleet by its capacity over llm-d's 14.41 requests/s", () => {
    const fleet = { profile: profileOf(resolveFleetOptions({ preset: "a100-7b" })), workers: 4 };
    const scale = b2bSaasRateScale(fleet);
    const capacity = rateForLoad(traceDemand(trace), fleet, 1);
    expect(scale).toBeCloseTo(capacity / LLMD_SATURATED_RPS, 9);
    // Scaled, the last stage offers our fleet what 60/s offered llm-d's: about 4.2 times its capacity.
    const scaled = b2bSaasTrace({ rateScale: scale });
    const lastStageS = (LLMD_STAGES.at(-1)?.durationS ?? 0) / scale;
    const lastStarts = (LLMD_STAGES.reduce((t, s) => t + s.durationS, 0) / scale - lastStageS) * 1000;
    const inLast = scaled.requests.filter((r) => r.atMs >= lastStarts).length;
    expect(inLast / lastStageS / capacity).toBeGreaterThan(60 / LLMD_SATURATED_RPS - 0.5);
    expect(inLast / lastStageS / capacity).toBeLessThan(60 / LLMD_SATURATED_RPS + 0.5);
  });
});
