/**
 * The peer routers bench:routing runs beside kvgate's strategies, on the same fleet and traces.
 * A peer's runs carry its name where kvgate's carry the strategy's, so a point compares in one
 * table. A peer that is not installed is skipped with a note, never faked.
 */
import { UsageError } from "../harness/argv.ts";
import type { PeerServer } from "../peers/portkey.ts";
import { SGLANG_POLICIES, sglangRouterInstalled, startSglangRouter } from "../peers/sglang-router.ts";
import { SGLANG_ROUTER_VERSION } from "../peers/versions.ts";

export interface RoutingPeer {
  /** The run's `strategy` in routing.json, e.g. `sglang-cache_aware`. */
  name: string;
  package: string;
  version: string;
  /** How it is configured, for the report. */
  settings: string;
  /** The argument of bench/peers/install.ts that installs it. */
  install: string;
  installed(): boolean;
  start(workerUrls: readonly string[], logFile: string): Promise<PeerServer>;
}

const SGLANG_SETTINGS: Record<(typeof SGLANG_POLICIES)[number], string> = {
  // Its defaults, from its --help: a character-level approximate radix tree per worker; above the
  // threshold the longest match wins, else the worker with the smallest tree; the load rule takes
  // over only when in-flight counts differ by more than both balance thresholds.
  cache_aware: "policy cache_aware at its defaults: cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5, eviction_interval_secs 60, max_tree_size 2^26",
  round_robin: "policy round_robin",
};

export const ROUTING_PEERS: readonly RoutingPeer[] = SGLANG_POLICIES.map((policy) => ({
  name: `sglang-${policy}`,
  package: "sglang-router",
  version: SGLANG_ROUTER_VERSION,
  settings: SGLANG_SETTINGS[policy],
  install: "sglang",
  installed: sglangRouterInstalled,
  start: (workerUrls, logFile) => startSglangRouter({ workerUrls, policy, logFile }),
}));

/**
 * The peers a `--peers` value asks for: every installed one when it is absent, none for `none`,
 * else the named ones (an unknown name is an error). Each one asked for but not installed is
 * left out with a note saying how to install it.
 */
export function selectPeers(flag: string | undefined, known: readonly RoutingPeer[] = ROUTING_PEERS): { peers: RoutingPeer[]; notes: string[] } {
  if (flag === "none") return { peers: [], notes: [] };
  const names = flag === undefined ? known.map((p) => p.name) : flag.split(",").filter(Boolean);
  const unknown = names.filter((n) => !known.some((p) => p.name === n));
  if (unknown.length > 0) throw new UsageError(`--peers: unknown peer ${unknown.join(", ")} (known: ${known.map((p) => p.name).join(", ")}, or none)`);
  const peers: RoutingPeer[] = [];
  const notes: string[] = [];
  for (const peer of known.filter((p) => names.includes(p.name))) {
    if (peer.installed()) peers.push(peer);
    else notes.push(`${peer.name}: ${peer.package} ${peer.version} is not installed, skipped (install: node bench/peers/install.ts ${peer.install})`);
  }
  return { peers, notes };
}
