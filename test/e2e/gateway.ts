import { randomBytes } from "node:crypto";
import { inject } from "vitest";
import { startGateway } from "../../bench/harness/gateway.ts";
import type { GatewayConfigInput } from "../../src/config/schema.ts";
import type { GroupStatus } from "../../src/routing/protocol.ts";

/**
 * The gateway Worker as a client meets it: bundled as `wrangler deploy` bundles it, run by workerd
 * (Miniflare) and reached over a real TCP socket on loopback — no test pool in between, so a
 * client can leave the way a real one does (close its socket) and the runtime sees exactly that.
 */
export interface TestGateway {
  url: string;
  /** The master key this gateway was given. */
  key: string;
  /** What workerd logged: the Worker's console and the runtime's own lines. */
  logs: string[];
  status(group: string): Promise<GroupStatus>;
  /** Sum of in-flight counts over the group's backends, as its Durable Object holds them. */
  inFlight(group: string): Promise<number>;
  close(): Promise<void>;
}

/**
 * `assets`: the pages too, in front of the Worker as Cloudflare serves them (bench/harness/gateway.ts).
 * `masterKey`: the master key's value (KVGATE_MASTER_KEY), a fresh `sk-e2e-…` unless given.
 */
export async function startTestGateway(
  config: GatewayConfigInput,
  bindings: Record<string, string> = {},
  { assets = false, masterKey = `sk-e2e-${randomBytes(16).toString("hex")}` } = {},
): Promise<TestGateway> {
  const key = masterKey;
  const logs: string[] = [];
  const verbose = process.env.KVGATE_TEST_LOGS === "1";
  const served = await startGateway({
    config,
    masterKey: key,
    bindings,
    scriptPath: inject("gatewayScript"),
    assets,
    onLog: (level, message) => {
      logs.push(`${level}: ${message}`);
      if (verbose) console.error(`[workerd ${level}] ${message}`);
    },
  });
  const status = async (group: string): Promise<GroupStatus> => {
    const res = await fetch(`${served.url}/v1/kvgate/status`, { headers: { authorization: `Bearer ${key}` } });
    const body = (await res.json()) as { groups: GroupStatus[] };
    const g = body.groups.find((x) => x.group === group);
    if (!g) throw new Error(`no group ${group} in the status`);
    return g;
  };
  return {
    url: served.url,
    key,
    logs,
    status,
    inFlight: async (group) => (await status(group)).backends.reduce((n, b) => n + b.inFlight, 0),
    close: () => served.dispose(),
  };
}

/** A bound for states the gateway reaches on its own; see test/workers/gateway.ts's EVENTUALLY. */
export const EVENTUALLY = { timeout: 10_000, interval: 20 } as const;

type GroupInput = NonNullable<GatewayConfigInput["modelGroups"]>[number];

/** The ways a stream takes the gateway's JavaScript loop, one group each (javascriptPathGroups). */
export const JAVASCRIPT_PATHS = ["restamped", "watched", "stripped"] as const;

/**
 * A group `<prefix>-<way>` on `deployment` for each way a stream takes the JavaScript loop: a chunk
 * hook (restamp), a stall bound, and a usage event to take out (every request sampled for
 * routing's feedback asks the upstream for it; a client that did not ask has it taken out again,
 * by an aligner of its own ahead of the loop's).
 */
export function javascriptPathGroups(prefix: string, deployment: NonNullable<GroupInput["deployments"]>[number]): GroupInput[] {
  return [
    { name: `${prefix}-restamped`, hooks: ["restamp"], deployments: [deployment] },
    { name: `${prefix}-watched`, streamIdleTimeoutMs: 60_000, deployments: [deployment] },
    { name: `${prefix}-stripped`, feedback: { sampleRate: 1 }, deployments: [deployment] },
  ];
}
