import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Strategy } from "../../src/config/schema.ts";
import type { Fleet } from "../fleet/index.ts";
import type { SchedulingPolicy } from "../fleet/scheduler.ts";
import { startGateway } from "../harness/gateway.ts";
import type { ReplayOptions } from "../replay/index.ts";
import { kvgateConfig } from "./kvgate-config.ts";
import { kvgateRouter, type Regime } from "./matrix.ts";
import type { RoutingPeer } from "./peers.ts";

/** A router in front of a run's fleet: where the replay sends, and how to stop it. */
export interface RunRouter {
  target: Pick<ReplayOptions, "baseUrl" | "apiKey" | "headers">;
  stop(): Promise<void>;
}

/** How a run's router starts: kvgate with the run's strategy, or the peer of that name. */
export interface RouterStart {
  /** A peer names no backend in its answers: its share is counted at the workers. */
  peer: boolean;
  /** The fleet's workers' order for waiting requests (a peer's fleet: first come, first served). */
  schedulingPolicy: SchedulingPolicy;
  start(fleet: Fleet): Promise<RunRouter>;
}

/**
 * The router named `name` (a kvgate strategy, prefix-aware over shards, or a peer in `peers`) for a fleet of `regime`'s GPU
 * preset and time scale. `scriptPath`: a gateway bundle already built (see startGateway).
 */
export function routerFor(name: string, regime: Pick<Regime, "preset" | "timeScale">, peers: readonly RoutingPeer[], scriptPath?: string): RouterStart {
  const kvgate = kvgateRouter(name);
  if (kvgate) return { peer: false, schedulingPolicy: kvgate.schedulingPolicy, start: (fleet) => startKvgate(kvgate, regime, fleet, scriptPath) };
  const peer = peers.find((x) => x.name === name);
  if (!peer) throw new Error(`no router named ${name}`);
  return { peer: true, schedulingPolicy: "fcfs", start: (fleet) => startPeer(peer, fleet) };
}

async function startKvgate(k: { strategy: Strategy; shards: number; schedulingPolicy: SchedulingPolicy }, regime: Pick<Regime, "preset" | "timeScale">, fleet: Fleet, scriptPath: string | undefined): Promise<RunRouter> {
  const gateway = await startGateway({ config: kvgateConfig(k.strategy, regime, fleet.urls, k.shards, k.schedulingPolicy), ...(scriptPath ? { scriptPath } : {}) });
  return { target: { baseUrl: gateway.url, apiKey: gateway.key }, stop: () => gateway.dispose() };
}

async function startPeer(peer: RoutingPeer, fleet: Fleet): Promise<RunRouter> {
  // Peer logs go to a file, not a pipe: an undrained pipe would stall a busy peer.
  const server = await peer.start(fleet.urls, join(tmpdir(), `kvgate-bench-routing-${peer.name}.log`));
  return { target: { baseUrl: server.url, headers: server.headers }, stop: () => server.stop() };
}
