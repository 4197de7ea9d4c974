import { randomBytes } from "node:crypto";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { rawPost } from "./client.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A server-side failure's verdict waits for the next attempt (workers/gateway/held-failure.ts).
 * When that attempt is cut before it can tell — the request's total deadline passes, or the client
 * leaves — nothing told whose the failure was: its backend is not charged with it. A prompt too
 * long to prefill in time would else charge the first backend it met every time it was sent.
 */

let upstream: HostileUpstream;
let sockets: WebSocketUpstream;
let gw: TestGateway;

// Servers that send nothing for 5 s: every attempt's first byte times out.
const slow = (id: string) => ({ id, baseUrl: `${upstream.url}/slow-headers:5000`, model: "hostile-7b" });
// Two consecutive failures open a breaker, for good within a test.
const breaker = { consecutiveFailures: 2, openMs: 60_000, probeIntervalMs: 60_000 };
// A server that answers at once, first in its group: round-robin gives it every third request.
const quick = (id: string) => ({ id, baseUrl: `${upstream.url}/ok`, model: "hostile-7b" });

beforeAll(async () => {
  upstream = await startHostileUpstream();
  sockets = await startWebSocketUpstream();
  gw = await startTestGateway({
    modelGroups: [
      // The second attempt's first byte is due after the request's deadline (≥ 2000 ms against 1500).
      // The 500 ms between the first timeout and the deadline is the time the retry has to be routed:
      // with 100 ms, a late timer or a slow route call on a loaded machine left no second attempt.
      { name: "deadline-cut", strategy: "round-robin", firstByteTimeoutMs: 1000, totalTimeoutMs: 1500, breaker, deployments: [slow("a"), slow("b")] },
      // 2 s is the time the client has to leave once the second attempt reached its upstream.
      { name: "client-cut", strategy: "round-robin", firstByteTimeoutMs: 2000, breaker, deployments: [slow("a"), slow("b")] },
      // The same, beside a backend that serves: the timeouts' backends look silent while another serves.
      { name: "deadline-cut-busy", strategy: "round-robin", firstByteTimeoutMs: 1000, totalTimeoutMs: 1500, breaker, deployments: [quick("c"), slow("a"), slow("b")] },
      { name: "client-cut-busy", strategy: "round-robin", firstByteTimeoutMs: 2000, breaker, deployments: [quick("c"), slow("a"), slow("b")] },
      // A realtime backend that crashes (500) on a session whose query holds crash-me, beside one slow to accept any.
      {
        name: "handshake-cut",
        strategy: "round-robin",
        breaker,
        deployments: [
          { id: "crashing", baseUrl: `${sockets.url}/crash:crash-me`, model: "rt" },
          { id: "slow", baseUrl: `${sockets.url}/slow:5000`, model: "rt" },
        ],
      },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await sockets?.close();
  await upstream?.close();
});

function streamed(model: string): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "a very long document" }], max_tokens: 4 }),
  });
}

/** Once the group's leases are all back: its backends, `ids`, each failed nothing, its breaker closed. */
async function expectNoneCharged(group: string, ids: string[]): Promise<void> {
  await vi.waitFor(async () => expect(await gw.inFlight(group)).toBe(0), EVENTUALLY);
  const charges = (await gw.status(group)).backends.map((b) => [b.id, b.failed, b.breaker.state]);
  expect(charges).toEqual(ids.map((id) => [id, 0, "closed"]));
}

/** Round-robin's first pick in a `*-busy` group: `c`, which answers; read to its end. */
async function servedByC(model: string): Promise<unknown> {
  const res = await streamed(model);
  await res.text();
  return [res.status, res.headers.get("x-kvgate-backend")];
}

/**
 * A streamed request to `model` whose first attempt's first byte times out (2 s): the client
 * leaves (a reset, which workerd sees at once) while the second waits for its own, once the second
 * reached its upstream (a fixed sleep, on a loaded machine, could outlast the second's timeout too;
 * the 2 s is the margin a stalled test process or a slow workerd has for the reset to land first).
 */
async function leaveDuringSecondAttempt(model: string): Promise<void> {
  const sent = upstream.stats("slow-headers").requests;
  const c = await rawPost(gw.url, "/v1/chat/completions", { model, stream: true, messages: [{ role: "user", content: "a very long document" }], max_tokens: 4 }, { authorization: `Bearer ${gw.key}` });
  await vi.waitFor(() => expect(upstream.stats("slow-headers").requests).toBe(sent + 2), { timeout: 10_000, interval: 10 });
  expect.soft(c.received()).toBe("");
  c.reset();
  await c.ended;
}

describe("a held failure whose next attempt was cut before it could tell", () => {
  it("by the request's total deadline: the request's 504, and neither backend is charged", async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await streamed("deadline-cut");
      answers.push([res.status, res.headers.get("x-kvgate-attempts"), res.headers.get("x-should-retry")]);
      await res.text();
    }
    expect.soft(answers).toEqual(Array.from({ length: 5 }, () => [504, "2", "false"]));
    await expectNoneCharged("deadline-cut", ["a", "b"]);
  });

  it("by the client leaving: neither backend is charged", async () => {
    for (let i = 0; i < 4; i++) await leaveDuringSecondAttempt("client-cut");
    await expectNoneCharged("client-cut", ["a", "b"]);
  });

  // Found by review: the held first-byte timeout was settled as a cut generation's (a client-abort
  // with timedOut), which the routing object judges by silence: its backend had served nothing
  // while `c` had, so it was charged an upstream-error, as silence no health probe undoes.
  it("by the request's total deadline, while another backend of the group serves: neither is charged", async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      answers.push(await servedByC("deadline-cut-busy"));
      const res = await streamed("deadline-cut-busy");
      answers.push([res.status, res.headers.get("x-kvgate-attempts")]);
      await res.text();
    }
    expect.soft(answers).toEqual([[200, "c"], [504, "2"], [200, "c"], [504, "2"]]);
    await expectNoneCharged("deadline-cut-busy", ["c", "a", "b"]);
  });

  it("by the client leaving, while another backend of the group serves: neither is charged", async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      answers.push(await servedByC("client-cut-busy"));
      await leaveDuringSecondAttempt("client-cut-busy");
    }
    expect.soft(answers).toEqual([[200, "c"], [200, "c"]]);
    await expectNoneCharged("client-cut-busy", ["c", "a", "b"]);
  });

  it("a realtime handshake, by the client leaving while the next backend has not accepted: the backend that crashed is not charged", async () => {
    const u = new URL(gw.url);
    for (let i = 0; i < 2; i++) {
      const socket = net.connect(Number(u.port), u.hostname);
      await new Promise<void>((resolve) => socket.once("connect", resolve));
      socket.on("error", () => {});
      const key = randomBytes(16).toString("base64");
      socket.write(`GET /v1/realtime?model=handshake-cut&instructions=crash-me HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${gw.key}\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: ${key}\r\n\r\n`);
      // Round-robin: the handshake meets the crash first or not at all; either way it ends waiting on the slow one.
      await vi.waitFor(() => expect(sockets.waiting()).toBe(1), EVENTUALLY);
      socket.resetAndDestroy();
      await vi.waitFor(() => expect(sockets.waiting()).toBe(0), EVENTUALLY);
    }
    await vi.waitFor(async () => expect(await gw.inFlight("handshake-cut")).toBe(0), EVENTUALLY);
    const crashing = (await gw.status("handshake-cut")).backends.find((b) => b.id === "crashing");
    // Round-robin began at least one of the two handshakes on it: its crash got no verdict.
    expect(crashing?.failed).toBe(0);
    expect(crashing?.aborted).toBeGreaterThan(0);
  });
});
