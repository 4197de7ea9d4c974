import type { GatewayConfigInput } from "../../src/config/schema.ts";
import { KEYED_HOST, VPC_HOST } from "./vpc-stand-in.ts";

declare module "vitest" {
  export interface ProvidedContext {
    upstreams: Upstreams;
  }
}

/** Where the test upstreams listen; provided by test/global-setup.ts. */
export interface Upstreams {
  fleetUrls: string[];
  scriptedUrl: string;
  deadUrl: string;
  /** Upstreams a test switches between healthy, failing and rate limiting (switchable-upstream.ts). */
  switchableUrls: string[];
}

/** The upstream model name the simulated fleet serves: unlike any group name, so rewriting shows. */
export const UPSTREAM_MODEL = "sim-upstream-7b";

export const TEST_LIMITS = { maxBodyBytes: 64 * 1024, maxMessages: 256, maxTools: 64, maxContentParts: 256, maxToolCalls: 128 };

const fleetGroup = (name: string, fleetUrls: string[], extra: Record<string, unknown> = {}) => ({
  name,
  deployments: fleetUrls.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: UPSTREAM_MODEL })),
  ...extra,
});

/** One group per scenario, so test files running side by side never share routing state. */
export function testConfig(u: Upstreams): GatewayConfigInput {
  return {
    // A server behind Access may register itself with the service token (test/workers/private-network.test.ts).
    auth: { masterKeyEnv: "KVGATE_MASTER_KEY", registrationSecrets: ["ACCESS_CLIENT_ID", "ACCESS_CLIENT_SECRET"] },
    cors: { allowedOrigins: ["https://app.example"] },
    limits: TEST_LIMITS,
    releaseFlushMs: 10,
    modelGroups: [
      fleetGroup("routing", u.fleetUrls, { aliases: ["routing-alias"], saturation: 4 }),
      fleetGroup("burst", u.fleetUrls, { saturation: 4 }),
      fleetGroup("leases", u.fleetUrls),
      fleetGroup("streaming", u.fleetUrls),
      fleetGroup("errors", u.fleetUrls, { firstByteTimeoutMs: 300, nonStreamTimeoutMs: 300 }),
      fleetGroup("sdk", u.fleetUrls, { hooks: ["restamp"] }),
      fleetGroup("short-lease", u.fleetUrls, { leaseTtlMs: 300 }),
      // Generated hostile bodies (test/workers/hostile-input.test.ts); the second caps fingerprints at 4 blocks of 8 characters.
      fleetGroup("hostile", u.fleetUrls, { aliases: ["hostile-alias"] }),
      fleetGroup("hostile-prefix", u.fleetUrls, { blockChars: 8, maxPrefixBlocks: 4 }),
      // A backend with room for two, and leases renewed every 300 ms (test/workers/leases.test.ts evicts its object mid-stream).
      { name: "evicted", leaseTtlMs: 900, deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL, maxInFlight: 2 }] },
      // Their objects are evicted under streams whose leases' timers renew them only every 10 s: the next request tells them (test/workers/leases.test.ts).
      { name: "evicted-busy", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL, maxInFlight: 2 }] },
      // Its server is drained under a stream, and its object evicted (test/workers/leases.test.ts): an object no test evicted before.
      { name: "evicted-drain", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      // Its drained server is idle when its object is evicted (test/workers/leases.test.ts): an object no test evicted before;
      // leases of 300 ms, so that the time its leases might run (1.5 × that after the last) passes within the test.
      { name: "evicted-idle", leaseTtlMs: 300, deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      // Quiet, read by status between its requests, as an open dashboard reads every group (test/workers/leases.test.ts).
      { name: "quiet-watched", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      { name: "evicted-keyed", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      { name: "evicted-quiet", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      // Its object is evicted under a request that ends before its lease's first renewal (every 10 s).
      { name: "evicted-usage", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      // Its object cannot send its keys' usage, and is evicted (test/workers/usage-outage.test.ts).
      { name: "usage-outage", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      // A fingerprint cut at 8 blocks (512 characters), and a prefill rate slow enough that its queued work stays put (test/workers/routing.test.ts).
      { name: "long-prompt", maxPrefixBlocks: 8, deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL, prefillTokensPerSec: 16 }] },
      // Its first release call fails (test/workers/leases.test.ts): one slot, so a release that never came would keep it at its cap.
      { name: "release-retry", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL, maxInFlight: 1 }] },
      { name: "one-slot", deployments: [{ id: "only", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL, maxInFlight: 1 }] },
      { name: "scripted", deployments: [{ id: "scripted", baseUrl: u.scriptedUrl, model: UPSTREAM_MODEL }] },
      { name: "scripted-restamp", hooks: ["restamp"], deployments: [{ id: "scripted", baseUrl: u.scriptedUrl, model: UPSTREAM_MODEL }] },
      { name: "dead", deployments: [{ id: "dead", baseUrl: u.deadUrl, model: UPSTREAM_MODEL }] },
      // test/workers/sharding.test.ts: the fleet over two routing objects, and a shard whose only server is dead.
      fleetGroup("sharded", u.fleetUrls, { shards: 2 }),
      // One server per shard, prefilling 16 tokens (a block) a second: a long prompt's queue stays put while a test looks.
      { name: "sharded-spill", shards: 2, deployments: [0, 1].map((i) => ({ id: `spill-${i}`, baseUrl: u.fleetUrls[i] as string, model: UPSTREAM_MODEL, prefillTokensPerSec: 16 })) },
      { name: "sharded-failover", shards: 2, deployments: [{ id: "dead", baseUrl: u.deadUrl, model: UPSTREAM_MODEL }, { id: "healthy", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      // test/workers/seed-conflict.test.ts: a deploy whose groups clash with ones the admin API added.
      { name: "seed-claim", aliases: ["seed-claimed"], deployments: [{ id: "sim-0", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      { name: "seed-refused", deployments: [{ id: "sim-0", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
      ...failoverGroups(u),
      ...privateNetworkGroups(u),
    ],
  };
}

/** Groups of test/workers/failover.test.ts: a dead, a switchable and a healthy backend side by side. */
function failoverGroups(u: Upstreams): NonNullable<GatewayConfigInput["modelGroups"]> {
  const healthy = { id: "healthy", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL };
  const dead = { id: "dead", baseUrl: u.deadUrl, model: UPSTREAM_MODEL };
  const flaky = (i: number) => ({ id: "flaky", baseUrl: u.switchableUrls[i] as string, model: UPSTREAM_MODEL });
  const breaker = { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 50, halfOpenRequests: 1, closeAfterSuccesses: 2 };
  return [
    { name: "failover-dead", strategy: "round-robin", breaker, deployments: [dead, healthy] },
    { name: "failover-breaker", strategy: "round-robin", breaker, deployments: [flaky(0), healthy] },
    { name: "failover-429", strategy: "round-robin", failover: { retryAfterCapMs: 200 }, breaker, deployments: [flaky(1), healthy] },
    { name: "failover-off", strategy: "round-robin", failover: { maxAttempts: 1 }, deployments: [dead, healthy] },
    // Its only backend's circuit opens at its first failure, and no probe closes it during a test: no backend left to try.
    { name: "failover-none-left", breaker: { ...breaker, consecutiveFailures: 1, probeIntervalMs: 60_000 }, deployments: [dead] },
    { name: "fallback-primary", fallbacks: ["fallback-target"], deployments: [dead] },
    { name: "fallback-target", deployments: [healthy] },
    { name: "stall", streamIdleTimeoutMs: 150, deployments: [healthy] },
    { name: "total-timeout", totalTimeoutMs: 300, failover: { maxAttempts: 1 }, deployments: [healthy] },
    // Probes far apart: an object whose alarm keeps firing is never idle, and eviction waits for it.
    { name: "durable-breaker", strategy: "round-robin", breaker: { ...breaker, probeIntervalMs: 60_000 }, deployments: [dead, healthy] },
    // test/workers/config-versions.test.ts routes it with this config and with a redeployed one.
    { name: "skew", strategy: "round-robin", breaker, deployments: u.fleetUrls.slice(0, 3).map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: UPSTREAM_MODEL })) },
    // test/workers/durable-object-state.test.ts: a snapshot over many backends; a breaker only probes can close.
    { name: "many-backends", snapshotIntervalMs: 20, deployments: Array.from({ length: 80 }, (_, i) => ({ id: `m${i}`, baseUrl: u.fleetUrls[i % u.fleetUrls.length] as string, model: UPSTREAM_MODEL })) },
    { name: "probed", breaker: { consecutiveFailures: 2, openMs: 600_000, probeIntervalMs: 200, closeAfterSuccesses: 2 }, deployments: [{ id: "probed", baseUrl: u.fleetUrls[1] as string, model: UPSTREAM_MODEL }] },
    { name: "durable", snapshotIntervalMs: 20, deployments: u.fleetUrls.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: UPSTREAM_MODEL })) },
  ];
}

/** Groups of test/workers/private-network.test.ts: a GPU server reached through a binding, and a group placed by a location hint. */
function privateNetworkGroups(u: Upstreams): NonNullable<GatewayConfigInput["modelGroups"]> {
  const access = { "CF-Access-Client-Id": "ACCESS_CLIENT_ID", "CF-Access-Client-Secret": "ACCESS_CLIENT_SECRET" };
  const privateServer = { id: "gpu-private", baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC" };
  return [
    { name: "vpc", deployments: [{ ...privateServer, headersFromEnv: access }] },
    { name: "vpc-no-token", failover: { maxAttempts: 1 }, deployments: [privateServer] },
    { name: "vpc-realtime", failover: { maxAttempts: 1 }, deployments: [{ ...privateServer, headersFromEnv: access }] },
    { name: "vpc-probed", breaker: { consecutiveFailures: 2, openMs: 600_000, probeIntervalMs: 200, closeAfterSuccesses: 2 }, deployments: [{ ...privateServer, model: "always-fails", headersFromEnv: access }] },
    { name: "vpc-registered", registrationBindings: ["GPU_VPC"], deployments: [] },
    // Public servers register themselves here: the operator listed no binding for it.
    { name: "public-registered", deployments: [] },
    { name: "vpc-registered-revoked", registrationBindings: ["GPU_VPC"], deployments: [] },
    // Its servers registered through GPU_VPC before groups listed bindings (test/workers/private-network.test.ts stores them so).
    { name: "vpc-upgraded", deployments: [] },
    // A server started with an API key, probed at a path behind it.
    { name: "keyed-probed", breaker: { consecutiveFailures: 2, openMs: 600_000, probeIntervalMs: 200, closeAfterSuccesses: 2, probePath: "/v1/models" }, deployments: [{ id: "gpu-keyed", baseUrl: `http://${KEYED_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC", apiKeyEnv: "GPU_API_KEY" }] },
    { name: "placed", locationHint: "weur", deployments: [{ id: "sim-0", baseUrl: u.fleetUrls[0] as string, model: UPSTREAM_MODEL }] },
  ];
}
