import { afterEach, describe, expect, it } from "vitest";
import { sglangRouterInstalled } from "../../bench/peers/sglang-router.ts";
import { REGIMES } from "../../bench/routing/matrix.ts";
import { ROUTING_PEERS } from "../../bench/routing/peers.ts";
import { startInstances, type RouterInstances } from "../../bench/routing/replica-routers.ts";
import { WARM_UP_REQUESTS, warmUp } from "../../bench/routing/warm-up.ts";
import { workerRequestCounts } from "../../bench/routing/worker-share.ts";
import { useFleets } from "../support/fleets.ts";

/**
 * A peer router scaled out as bench:routing-replicas runs it: N independent processes in front of
 * the same fleet. Only where SGLang's router is installed (`node bench/peers/install.ts sglang`).
 * kvgate's instances are tested through the bundled gateway (test/e2e/gateway-instances.test.ts).
 */
const fleetOf = useFleets();
const MODEL = "kvgate-sim";
const ROOMY = REGIMES[0] as (typeof REGIMES)[number];
const started: RouterInstances[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((r) => r.stop()));
});

describe("router instances", () => {
  it("refuse a router name that is neither a kvgate strategy nor a known peer", async () => {
    const fleet = await fleetOf({ workers: 1 });
    await expect(startInstances("prefix_aware", 2, ROOMY, fleet, ROUTING_PEERS)).rejects.toThrow("no router named prefix_aware");
  });

  it.skipIf(!sglangRouterInstalled())("sglang-cache_aware: N processes, each serving every worker on its own port, all stopped together", { timeout: 90_000 }, async () => {
    const fleet = await fleetOf({ workers: 2 });
    const routers = await startInstances("sglang-cache_aware", 2, ROOMY, fleet, ROUTING_PEERS);
    started.push(routers);
    expect(routers.urls).toHaveLength(2);
    expect(new Set(routers.urls).size).toBe(2);
    for (const url of routers.urls) await warmUp({ ...routers.auth, baseUrl: url, model: MODEL });
    const served = await workerRequestCounts(fleet.urls);
    expect(served.reduce((a, b) => a + b, 0)).toBe(2 * WARM_UP_REQUESTS);
    await routers.stop();
    for (const url of routers.urls) await expect(fetch(`${url}/liveness`)).rejects.toThrow();
  });
});
