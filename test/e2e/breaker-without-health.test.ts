import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A backend whose probePath answers nothing useful — Ollama has no /health, an ingress may expose
 * only /v1/* — is probed while its breaker is open or half-open, and every probe fails, whatever
 * its engine does. After a transient outage, its trials (real requests) are what can tell it came
 * back: a failed probe must not take that word from them, or a trial longer than a probe interval
 * (a chat stream) never closes the breaker and the backend cycles open / half-open for good.
 */

let upstream: HostileUpstream;
let gw: TestGateway;

const OUTAGE = 2;
const GROUP = "no-health-recovery";

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({
    modelGroups: [
      {
        name: GROUP,
        failover: { maxAttempts: 1 },
        // Probes every 50–150 ms: several fail during each 2 s trial stream. Trials as by default (2, 2 to close).
        breaker: { consecutiveFailures: OUTAGE, openMs: 500, probeIntervalMs: 100 },
        // Its first OUTAGE requests fail (500), then each stream takes 2 s; /health is a 404 throughout.
        deployments: [{ id: "ollama", baseUrl: `${upstream.url}/no-health:${OUTAGE}`, model: "llama3" }],
      },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

function chat(stream: boolean): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: GROUP, messages: [{ role: "user", content: `hello ${Math.random()}` }], max_tokens: 32, stream }),
  });
}

/** A client's chat stream, sent again after a 503 (its backend's breaker open) until one is let through, 200 tries at most; its status and text. */
async function streamOnceAdmitted(): Promise<{ status: number; text: string }> {
  for (let tries = 1; ; tries++) {
    const res = await chat(true);
    const text = await res.text();
    if (res.status !== 503 || tries === 200) return { status: res.status, text };
    await new Promise((r) => setTimeout(r, 50));
  }
}

const breakerOf = async () => (await gw.status(GROUP)).backends[0]?.breaker;

describe("a backend whose health endpoint 404s, after a transient outage", () => {
  it("is closed again by its trials, two 2 s chat streams, though every probe during them failed", async () => {
    upstream.reset();
    for (let i = 0; i < OUTAGE; i++) {
      const res = await chat(false);
      expect(res.status).toBe(502);
      await res.text();
    }
    await vi.waitFor(async () => expect((await breakerOf())?.state).toBe("open"), EVENTUALLY);

    // The outage is over: two clients stream, each its request let through once the cool-down ends.
    const probesBefore = upstream.stats("no-health").health;
    const answers = await Promise.all([streamOnceAdmitted(), streamOnceAdmitted()]);
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.text).toContain("w19 ");
      expect(a.text).toContain("data: [DONE]");
    }
    // Its probes went on meanwhile, each a 404: no word on its engine.
    expect(upstream.stats("no-health").health).toBeGreaterThan(probesBefore);

    // Closed by those two trials, having opened once: for the outage, not again for a failed probe.
    await vi.waitFor(async () => {
      const b = await breakerOf();
      expect([b?.state, b?.opened]).toEqual(["closed", 1]);
    }, EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight(GROUP)).toBe(0), EVENTUALLY);
    // Closed, it takes the next request at once.
    const next = await chat(true);
    expect(next.status).toBe(200);
    await next.text();
  });
});
