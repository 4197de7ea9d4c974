import { describe, expect, it } from "vitest";
import { FaultDice } from "../../bench/fleet/faults.ts";
import { useFleets } from "../support/fleets.ts";
import { postJson, readSse, type ErrorBody } from "../../bench/fleet/sim-client.ts";

const fleetOf = useFleets();

const body = { model: "kvgate-sim", messages: [{ role: "user", content: "hi" }], max_tokens: 3 };

describe("worker faults", () => {
  it("errorRate 1 on one worker answers 500 there and nowhere else", async () => {
    const fleet = await fleetOf({ workers: 2, faultWorker: 1, errorRate: 1 });
    const healthy = await postJson(`${fleet.urls[0]}/v1/chat/completions`, body);
    const faulty = await postJson(`${fleet.urls[1]}/v1/chat/completions`, body);
    expect(healthy.status).toBe(200);
    expect(faulty.status).toBe(500);
    expect((faulty.json as ErrorBody).error.code).toBe(500);
  });

  it("dieAfterRequests serves N requests, then the port refuses connections", async () => {
    const fleet = await fleetOf({ workers: 2, faultWorker: 0, dieAfterRequests: 2 });
    const url = `${fleet.urls[0]}/v1/chat/completions`;
    expect((await postJson(url, body)).status).toBe(200);
    expect((await postJson(url, body)).status).toBe(200);
    await expect(postJson(url, body)).rejects.toThrow();
    await expect(fetch(`${fleet.urls[0]}/health`)).rejects.toThrow();
    expect((await postJson(`${fleet.urls[1]}/v1/chat/completions`, body)).status).toBe(200);
  });

  it("stallRate 1 stalls streams after stallAfterChunks events", async () => {
    const fleet = await fleetOf({ workers: 1, stallRate: 1, stallAfterChunks: 2 });
    // A stall is a stall however long the client waits: 3 s, so that a loaded machine's slow
    // connect and first events are not cut short (with 0.4 s the count sometimes came up short).
    const read = await readSse(`${fleet.urls[0]}/v1/chat/completions`, { ...body, stream: true }, AbortSignal.timeout(3000));
    expect(read.ended).toBe("error");
    // The role event, then two content events.
    expect(read.events).toHaveLength(3);
  }, 15_000);

  it("draws the same failures for the same seed", () => {
    const draws = (seed: number): boolean[] => {
      const dice = new FaultDice(seed);
      return Array.from({ length: 50 }, () => dice.chance(0.5));
    };
    expect(draws(7)).toEqual(draws(7));
    expect(draws(7)).not.toEqual(draws(8));
    expect(draws(7).filter(Boolean).length).toBeGreaterThan(10);
  });
});
