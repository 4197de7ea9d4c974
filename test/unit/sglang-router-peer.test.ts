import { afterEach, describe, expect, it } from "vitest";
import type { PeerServer } from "../../bench/peers/portkey.ts";
import { sglangRouterInstalled, startSglangRouter } from "../../bench/peers/sglang-router.ts";
import { replay, summarize } from "../../bench/replay/index.ts";
import { warmUp, WARM_UP_REQUESTS } from "../../bench/routing/warm-up.ts";
import { shareBetween, workerRequestCounts } from "../../bench/routing/worker-share.ts";
import { generateTrace } from "../../bench/traces/index.ts";
import { useFleets } from "../support/fleets.ts";

/**
 * SGLang's router in front of the simulated fleet, as bench:routing runs it. Only where it is
 * installed (`node bench/peers/install.ts sglang`): it is a peer, not a dependency of the project.
 */
const fleetOf = useFleets();
const MODEL = "kvgate-sim";
const LOG = "/dev/null";
const routers: PeerServer[] = [];
afterEach(async () => {
  await Promise.all(routers.splice(0).map((r) => r.stop()));
});

describe.skipIf(!sglangRouterInstalled())("SGLang's router in front of the fleet", () => {
  it("round_robin: waits for every worker, streams through, and spreads evenly", { timeout: 60_000 }, async () => {
    const fleet = await fleetOf({ workers: 4 });
    const router = await startSglangRouter({ workerUrls: fleet.urls, policy: "round_robin", logFile: LOG });
    routers.push(router);
    await warmUp({ baseUrl: router.url, model: MODEL });
    const counts = await workerRequestCounts(fleet.urls);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(WARM_UP_REQUESTS);

    const result = await replay(generateTrace("single-turn", { sessions: 8, turns: 1 }), { baseUrl: router.url, model: MODEL });
    expect(summarize(result).errors).toBe(0);
    expect(shareBetween(counts, await workerRequestCounts(fleet.urls))).toEqual({ "gpu-0": 0.25, "gpu-1": 0.25, "gpu-2": 0.25, "gpu-3": 0.25 });
  });

  it("cache_aware: later turns find their prefix cached, reported through it; stopping frees its port", { timeout: 60_000 }, async () => {
    const fleet = await fleetOf({ workers: 2 });
    const router = await startSglangRouter({ workerUrls: fleet.urls, policy: "cache_aware", logFile: LOG });
    routers.push(router);
    const result = await replay(generateTrace("multi-turn", { sessions: 2, turns: 3 }), { baseUrl: router.url, model: MODEL });
    const s = summarize(result);
    expect(s.errors).toBe(0);
    expect(s.kv_hit).toBeGreaterThan(0.5);
    await router.stop();
    await expect(fetch(`${router.url}/liveness`)).rejects.toThrow();
  });
});
