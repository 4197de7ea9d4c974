import OpenAI from "openai";
import { describe, expect, inject, it } from "vitest";
import { startFleet } from "../../bench/fleet/index.ts";
import { startGateway } from "../../bench/harness/gateway.ts";
import { kvgateConfig } from "../../bench/routing/kvgate-config.ts";
import { MODEL } from "../../bench/routing/matrix.ts";
import { mooncakeTrace } from "../../bench/traces/index.ts";
import { MOONCAKE_SLICE_STARTS, OPEN_LOOP_REGIME, OPEN_LOOP_SETUPS, headOf, scheduleOf } from "../../bench/routing/open-loop-matrix.ts";
import { runOpenLoopPoint } from "../../bench/routing/open-loop-run.ts";
import { routerFor } from "../../bench/routing/routers.ts";

/**
 * One open-loop point of bench:routing end to end: the first seconds of the Mooncake slice of
 * seed 1, replayed at its arrival times through kvgate (the bundled Worker in workerd, prefix-aware)
 * in front of a fresh simulated fleet of 4 workers whose context takes the trace's long prompts.
 * The fleet runs 10× faster than the A100 it stands for, so the test is short; what is checked is
 * the run's record, not the machine's timing.
 */

/** The slice's first two bursts: its timestamps come in steps of about 3.5 s (4.1 s at its speed). */
const SECONDS = 5;

describe("an open-loop point of bench:routing", () => {
  it("replays the Mooncake slice's first seconds through kvgate and records every figure of the run", { timeout: 120_000 }, async () => {
    const real = OPEN_LOOP_SETUPS.mooncake;
    const whole = scheduleOf({ setup: real, seed: 1, quick: false });
    const { trace, arrivalsMs } = headOf(whole.trace, whole.arrivalsMs, SECONDS * 1000);
    const schedule = { ...whole, trace, arrivalsMs };
    const setup = { ...real, timeScale: 0.1, sloTtftMs: real.sloTtftMs * 0.1 };
    const point = { setup, strategy: "prefix-aware", seed: 1, quick: false };

    const { run, errorSamples } = await runOpenLoopPoint(point, routerFor("prefix-aware", setup, [], inject("gatewayScript")), schedule);

    expect(trace.requests.length).toBeGreaterThan(20);
    expect(errorSamples).toEqual([]);
    expect(run).toMatchObject({ regime: OPEN_LOOP_REGIME, trace: "mooncake", strategy: "prefix-aware", seed: 1, requests: trace.requests.length, errors: 0, overflow: 0, cut: 0 });
    expect(run.sent).toBe(run.requests);
    expect(run.completed).toBe(run.requests);
    expect(run.arrivals).toEqual({ mode: "trace", speed: whole.arrivals.mode === "trace" ? whole.arrivals.speed : NaN, from_minutes: MOONCAKE_SLICE_STARTS[0], minutes: 2 });

    // Every request opens on the trace's shared first block: after the first, each finds it cached.
    expect(run.kv_ceiling).toBeGreaterThan(0);
    expect(run.kv_hit).toBeGreaterThan(0);
    expect(run.kv_hit as number).toBeLessThanOrEqual((run.kv_ceiling as number) * 1.01);
    expect(run.kv_hit_of_ceiling).toBeCloseTo((run.kv_hit as number) / (run.kv_ceiling as number), 9);

    const t = run.ttft_ms;
    expect(t.p50).toBeGreaterThan(0);
    expect(t.p95).toBeGreaterThanOrEqual(t.p50 as number);
    expect(t.p99).toBeGreaterThanOrEqual(t.p95 as number);
    expect(run.goodput.slo_ttft_ms).toBe(200);
    expect(run.goodput.share).toBeGreaterThanOrEqual(0);
    expect(run.goodput.share).toBeLessThanOrEqual(1);
    expect(run.goodput.requests).toBeLessThanOrEqual(run.completed);

    // The client's lag behind its schedule and the workers' queues were read during the run.
    expect(run.queueing.send_lag_ms.max).toBeGreaterThanOrEqual(0);
    expect(run.queueing.server?.samples).toBeGreaterThan(2);
    expect(run.queueing.server?.failed_reads).toBe(0);

    // kvgate named a backend of the fleet for every request.
    const shares = Object.entries(run.backend_share);
    expect(shares.every(([backend]) => /^gpu-[0-3]$/.test(backend))).toBe(true);
    expect(shares.reduce((a, [, s]) => a + s, 0)).toBeCloseTo(1, 9);

    // How kvgate decided each request, one reason per request.
    expect(Object.values(run.route_reasons).reduce((a, b) => a + b, 0)).toBe(run.sent);
    expect(Object.keys(run.route_reasons).every((r) => ["prefix-hit", "hot-spread", "least-loaded", "saturated-spill", "load-balanced"].includes(r))).toBe(true);

    expect(run.working_set_tokens).toBe(schedule.working_set_tokens);
    expect(run.load).toEqual(schedule.load);
  });
});

describe("kvgate's defaults in front of the Mooncake trace's longest prompt", () => {
  it("serves it whole (a ~500 KB body under the 4 MiB limit) and fingerprints its first 2,048 blocks", { timeout: 60_000 }, async () => {
    const longest = mooncakeTrace({ file: "conversation" }).requests.reduce((a, r) => (r.promptTokens > a.promptTokens ? r : a));
    expect(longest.promptTokens).toBeGreaterThan(120_000);
    const setup = OPEN_LOOP_SETUPS.mooncake;
    const fleet = await startFleet({ workers: 4, basePort: 0, preset: "instant", maxModelLen: setup.maxModelLen, servedModelName: MODEL });
    try {
      const gw = await startGateway({ config: kvgateConfig("prefix-aware", setup, fleet.urls), scriptPath: inject("gatewayScript"), onLog: () => {} });
      try {
        const client = new OpenAI({ apiKey: gw.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
        // A Mooncake prompt is one user message.
        const messages = longest.messages().map((m) => ({ role: "user" as const, content: m.content }));
        expect(JSON.stringify(messages).length).toBeGreaterThan(480_000);
        const { data, response } = await client.chat.completions.create({ model: MODEL, max_tokens: 4, messages }).withResponse();
        // The simulator counts the trace's tokens plus its chat template's.
        expect(data.usage?.prompt_tokens).toBe(longest.promptTokens + 22);
        expect(response.headers.get("x-kvgate-prefix-blocks")).toBe("0/2048");
      } finally {
        await gw.dispose();
      }
    } finally {
      await fleet.close();
    }
  });
});
