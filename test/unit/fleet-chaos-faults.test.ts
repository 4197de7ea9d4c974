import { describe, expect, it } from "vitest";
import { parseFleetArgs } from "../../bench/fleet/cli-args.ts";
import { startFleet, type Fleet, type FaultEvent } from "../../bench/fleet/index.ts";
import { faultsFor, resolveFleetOptions } from "../../bench/fleet/options.ts";
import { postJson, readSse, type CompletionBody } from "../../bench/fleet/sim-client.ts";
import { useFleets } from "../support/fleets.ts";

const fleetOf = useFleets();

const body = { model: "kvgate-sim", messages: [{ role: "user", content: "hi" }], max_tokens: 3 };
/** Long enough to fill whole KV blocks, so a repeat of it hits the cache. */
const cacheable = { model: "kvgate-sim", messages: [{ role: "user", content: "a prompt that spans a few cache blocks ".repeat(12) }], max_tokens: 2 };

async function waitFor(what: string, test: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const kinds = (fleet: Fleet, worker: number): FaultEvent["kind"][] => fleet.events.filter((e) => e.worker === worker).map((e) => e.kind);

/** The error code under a failed fetch: ECONNREFUSED for a closed port, ECONNRESET for a cut socket. */
async function connectError(url: string): Promise<string> {
  try {
    const res = await fetch(url);
    return `HTTP ${res.status}`;
  } catch (error) {
    const cause = error instanceof Error ? error.cause : undefined;
    return cause instanceof Error && "code" in cause ? String(cause.code) : String(error);
  }
}

describe("per-worker fault knobs", () => {
  it("gives each worker its own knobs, over the fleet-wide ones", async () => {
    const fleet = await fleetOf({ workers: 3, faultWorker: "all", errorRate: 1, faults: { 0: { errorRate: 0 }, 2: { errorRate: 0, slowFactor: 2 } } });
    const statuses = await Promise.all(fleet.urls.map(async (u) => (await postJson(`${u}/v1/chat/completions`, body)).status));
    expect(statuses).toEqual([200, 500, 200]);
  });

  it("rejects a worker outside the fleet, an unknown knob, a bad value and a flap with no down time", async () => {
    await expect(startFleet({ workers: 2, basePort: 0, faults: { 2: { errorRate: 1 } } })).rejects.toThrow(/worker 2/);
    const o = resolveFleetOptions({ workers: 2 });
    expect(() => faultsFor(o, 0, JSON.parse('{"0": {"errorRat": 1}}') as Record<number, never>)).toThrow(/errorRat/);
    expect(() => faultsFor(o, 0, { 0: { errorRate: 2 } })).toThrow(/faults\[0\]\.errorRate/);
    expect(() => faultsFor(o, 1, { 1: { flapCycles: 2, flapUpMs: 100 } })).toThrow(/flapDownMs/);
    expect(() => resolveFleetOptions({ flapCycles: 1 })).toThrow(/flapDownMs/);
  });

  it("takes the time-based knobs as CLI flags", () => {
    expect(parseFleetArgs(["--fault-worker", "1", "--die-at-ms", "5000", "--onset-ms=100", "--flap-down-ms", "20", "--flap-up-ms", "30", "--flap-cycles", "3"])).toEqual({
      help: false,
      options: { faultWorker: 1, dieAtMs: 5000, onsetMs: 100, flapDownMs: 20, flapUpMs: 30, flapCycles: 3 },
    });
  });
});

describe("time-based faults", () => {
  it("onsetMs: the worker answers normally, then 500s from the onset on", async () => {
    const fleet = await fleetOf({ workers: 2, faults: { 1: { errorRate: 1, onsetMs: 300 } } });
    const url = `${fleet.urls[1]}/v1/chat/completions`;
    expect((await postJson(url, body)).status).toBe(200);
    await waitFor("the onset", () => kinds(fleet, 1).includes("onset"));
    expect((await postJson(url, body)).status).toBe(500);
    expect((await postJson(`${fleet.urls[0]}/v1/chat/completions`, body)).status).toBe(200);
    const onset = fleet.events.find((e) => e.kind === "onset");
    expect((onset?.at ?? 0) - (fleet.faultsStartedAt ?? 0)).toBeGreaterThanOrEqual(295);
  });

  it("slowFactor with an onset: the same request takes several times longer after it", async () => {
    // 10 tokens at 8 ms a step: ~80 ms, then ~2.4 s at 30x.
    const fleet = await fleetOf({ workers: 1, preset: "instant", decodeStepMs: 8, faults: { 0: { slowFactor: 30, onsetMs: 400 } } });
    const url = `${fleet.urls[0]}/v1/chat/completions`;
    const timed = async (): Promise<number> => {
      const t0 = performance.now();
      expect((await postJson(url, { ...body, max_tokens: 10 })).status).toBe(200);
      return performance.now() - t0;
    };
    const before = await timed();
    await waitFor("the onset", () => kinds(fleet, 0).includes("onset"));
    const after = await timed();
    // Sleeps are lower bounds whatever the machine's load: the first token comes with the prefill,
    // the other 9 take a step of 240 ms each, 2,160 ms (less a millisecond per timer, which
    // libuv may fire early) at least; before the onset the same request
    // cannot take that long unless the machine stalled for two seconds (a ratio of the two failed
    // on a loaded machine, where `before` took 190 ms; at 8x, a half-second stall would have).
    expect(after).toBeGreaterThanOrEqual(2150);
    expect(before).toBeLessThan(2150);
  }, 15_000);

  it("holdFaults: nothing happens until startFaults(), then dieAtMs counts from it, cuts open streams and closes the port", async () => {
    // 1 s: the stream (2 s of tokens) must have given the client more than one event by then, which
    // 150 ms did not leave a loaded machine's timers room for.
    const fleet = await fleetOf({ workers: 2, holdFaults: true, faults: { 0: { dieAtMs: 1000 } } });
    // Past dieAtMs: a clock started at creation would have killed the worker already.
    await new Promise((r) => setTimeout(r, 1200));
    expect(fleet.faultsStartedAt).toBeNull();
    expect((await postJson(`${fleet.urls[0]}/v1/chat/completions`, body)).status).toBe(200);

    // 100 tokens 20 ms apart: still streaming when the worker dies.
    const streaming = readSse(`${fleet.urls[0]}/v1/chat/completions`, { ...body, stream: true, kvgate_sim: { tokens: 100, chunk_delay_ms: 20 } }, AbortSignal.timeout(5000));
    // The fault clock starts once the worker has the stream: started before it was sent, a loaded
    // machine's connect could outlast dieAtMs, and the worker died before the stream began.
    await waitFor("the stream's arrival", () => fleet.requests(0).length === 2);
    fleet.startFaults();
    const read = await streaming;
    expect(read.ended).toBe("error");
    expect(read.events.length).toBeGreaterThan(1);
    expect(read.events.some((e) => e.data === "[DONE]")).toBe(false);

    expect(kinds(fleet, 0)).toEqual(["dead"]);
    const dead = fleet.events[0]?.at ?? 0;
    // Less a few ms libuv may fire a timer early.
    expect(dead - (fleet.faultsStartedAt ?? 0)).toBeGreaterThanOrEqual(995);
    expect(await connectError(`${fleet.urls[0]}/health`)).toBe("ECONNREFUSED");
    expect((await postJson(`${fleet.urls[1]}/v1/chat/completions`, body)).status).toBe(200);
    // The log outlives the worker, each request stamped with its arrival.
    const log = fleet.requests(0);
    expect(log).toHaveLength(2);
    expect(log.every((r) => r.at > 0 && r.at <= dead)).toBe(true);
  }, 15_000);

  it("flaps: connection refused while down, back on the same port with an empty cache, then stays up", async () => {
    const fleet = await fleetOf({ workers: 1, faults: { 0: { onsetMs: 500, flapDownMs: 400, flapUpMs: 400, flapCycles: 2 } } });
    const base = fleet.urls[0] ?? "";
    const url = `${base}/v1/chat/completions`;
    await postJson(url, cacheable);
    const warm = (await postJson(url, cacheable)).json as CompletionBody;
    expect(warm.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);

    // A stream open at the first down is cut, as a crashed server's connections are.
    const read = await readSse(url, { ...body, stream: true, kvgate_sim: { tokens: 100, chunk_delay_ms: 20 } }, AbortSignal.timeout(5000));
    expect(read.ended).toBe("error");
    expect(kinds(fleet, 0)).toEqual(["onset", "down"]);
    expect(await connectError(`${base}/health`)).toBe("ECONNREFUSED");

    await waitFor("the first up", () => kinds(fleet, 0).length === 3);
    expect(kinds(fleet, 0)).toEqual(["onset", "down", "up"]);
    expect((await fetch(`${base}/health`)).status).toBe(200);
    const cold = (await postJson(url, cacheable)).json as CompletionBody;
    expect(cold.usage.prompt_tokens_details.cached_tokens).toBe(0);

    await waitFor("the second down", () => kinds(fleet, 0).length === 4);
    expect(await connectError(`${base}/health`)).toBe("ECONNREFUSED");
    await waitFor("the second up", () => kinds(fleet, 0).length === 5);
    expect(kinds(fleet, 0)).toEqual(["onset", "down", "up", "down", "up"]);

    // Down and up 400 ms each, on the clock: none before its time. (No bound after it: that would
    // time the machine, which a busy one stalls; the waits above bound a flap that never comes.)
    const t0 = fleet.faultsStartedAt ?? 0;
    const offsets = fleet.events.slice(1).map((e) => e.at - t0);
    [500, 900, 1300, 1700].forEach((expected, i) => expect(offsets[i]).toBeGreaterThanOrEqual(expected - 5));

    // No more cycles: it stays up.
    await new Promise((r) => setTimeout(r, 600));
    expect(kinds(fleet, 0)).toHaveLength(5);
    expect((await postJson(url, body)).status).toBe(200);
  });

  it("close() during a flap's down frees everything and reports no death", async () => {
    const fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant", faults: { 0: { flapDownMs: 10_000, flapUpMs: 100, flapCycles: 1 } } });
    await waitFor("the down", () => kinds(fleet, 0).includes("down"));
    await fleet.close();
    await new Promise((r) => setTimeout(r, 50));
    expect(kinds(fleet, 0)).toEqual(["onset", "down"]);
  });
});
