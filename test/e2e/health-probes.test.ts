import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * The group's Durable Object probes open backends (GET probePath). A probe must judge the backend
 * itself: a redirect elsewhere is no answer from it, and is not followed (issue 10 §5).
 */

let upstream: HostileUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({
    modelGroups: [
      {
        name: "redirected-probes",
        failover: { maxAttempts: 1 },
        breaker: { consecutiveFailures: 1, openMs: 600_000, probeIntervalMs: 50, closeAfterSuccesses: 1 },
        deployments: [{ id: "down", baseUrl: `${upstream.url}/redirect-health`, model: "hostile-7b" }],
      },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

describe("a health probe answered with a redirect", () => {
  it("is a failed probe: the redirect is not followed and the breaker stays open", async () => {
    upstream.reset();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "redirected-probes", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
    });
    expect(res.status).toBe(502);
    await res.text();
    const breaker = async () => (await gw.status("redirected-probes")).backends[0]?.breaker.state;
    await vi.waitFor(async () => expect(await breaker()).toBe("open"), EVENTUALLY);
    // Several probes, each answered 302 to an origin that would say 200: none reaches it, none passes.
    await vi.waitFor(async () => {
      expect(upstream.elsewhere.hits()).toBe(0);
      expect(await breaker()).toBe("open");
      expect(upstream.stats("redirect-health").health).toBeGreaterThanOrEqual(4);
    }, EVENTUALLY);
  });
});
