import { describe, expect, inject, it } from "vitest";
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
