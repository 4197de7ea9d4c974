/**
 * A router run as N instances in front of one fleet. kvgate's instances are N gateway Workers,
 * each its own isolate, all asking the group's one Durable Object (one index); a peer's are N
 * independent processes, each knowing every worker and keeping its own index, as a peer router is
 * scaled out.
 */
import { join } from "node:path";
import { tmpdir } from "node:os";
import type { Fleet } from "../fleet/index.ts";
import { startGateway } from "../harness/gateway.ts";
import type { PeerServer } from "../peers/portkey.ts";
import type { ReplayOptions } from "../replay/index.ts";
import { kvgateConfig } from "./kvgate-config.ts";
import { isKvgateStrategy, type Regime } from "./matrix.ts";
import type { RoutingPeer } from "./peers.ts";

export interface RouterInstances {
  /** Each instance's own address. */
  urls: string[];
  /** What every request carries, whichever instance it reaches. */
  auth: Pick<ReplayOptions, "apiKey" | "headers">;
  stop(): Promise<void>;
}

/** Starts `count` instances of the router `name` (a kvgate strategy or one of `peers`) in front of `fleet`. */
export async function startInstances(name: string, count: number, regime: Regime, fleet: Fleet, peers: readonly RoutingPeer[]): Promise<RouterInstances> {
  if (isKvgateStrategy(name)) {
    const gateway = await startGateway({ config: kvgateConfig(name, regime, fleet.urls), instances: count });
    return { urls: gateway.urls, auth: { apiKey: gateway.key }, stop: () => gateway.dispose() };
  }
  const peer = peers.find((p) => p.name === name);
  if (!peer) throw new Error(`no router named ${name}`);
  return startPeerInstances(peer, count, fleet);
}

async function startPeerInstances(peer: RoutingPeer, count: number, fleet: Fleet): Promise<RouterInstances> {
  const started: PeerServer[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(started.splice(0).map((s) => s.stop()));
  };
  try {
    // One after another: N processes starting at once on two cores would time each other out.
    for (let i = 0; i < count; i++) {
      // Logs to a file, not a pipe: an undrained pipe would stall a busy peer.
      started.push(await peer.start(fleet.urls, join(tmpdir(), `kvgate-bench-replicas-${peer.name}-${i}.log`)));
    }
  } catch (e) {
    await stop();
    throw e;
  }
  const headers = started[0]?.headers ?? {};
  return { urls: started.map((s) => s.url), auth: { headers }, stop };
}
