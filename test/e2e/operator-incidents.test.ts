import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import type { RequestLine } from "../../src/logging/request-log.ts";
import { closedPort } from "../support/closed-port.ts";
import { metricsText as scrape, sample } from "../support/metrics-scrape.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import type { StatusGroup } from "../../src/fleet/admin-api.ts";
import { browserPages, type BrowserPages } from "./browser-pages.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What an on-call engineer sees of a misbehaving fleet: the bundled gateway in workerd on a real
 * socket, the scripted hostile upstream as the broken servers (one refusing connections, one still
 * loading its model, one answering 500s, one wedged, one rate limiting) beside the simulated fleet.
 * Each incident must show in /metrics as a series an alert can be written on, and in the request's
 * log line, naming the backend and what it met.
 */

let upstream: HostileUpstream;
let fleet: Fleet;
let gw: TestGateway;
let pages: BrowserPages;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;

const sim = (i: number) => ({ id: `sim-${i}`, baseUrl: fleet.urls[i] as string, model: "sim-7b" });
const hostile = (id: string, behaviour: string) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "sim-7b" });
// Round-robin puts the broken server first: each group's first request meets it. No probe, no breaker in the way.
const group = (name: string, deployments: { id: string; baseUrl: string; model: string }[]) => ({
  name,
  strategy: "round-robin" as const,
  firstByteTimeoutMs: 400,
  breaker: { consecutiveFailures: 100, openMs: 600_000, probeIntervalMs: 600_000 },
  deployments,
});

beforeAll(async () => {
  upstream = await startHostileUpstream();
  fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  const dead = `http://127.0.0.1:${await closedPort()}`;
  gw = await startTestGateway(
    {
      modelGroups: [
        group("g-loading", [hostile("loading", "loading"), sim(0)]),
        group("g-500", [hostile("crashing", "html-500"), sim(0)]),
        group("g-wedged", [hostile("wedged", "wedged"), sim(0)]),
        group("g-429", [hostile("limited", "rate-limited:30"), sim(0)]),
        group("g-dead", [{ id: "dead", baseUrl: dead, model: "sim-7b" }]),
        group("g-endless", [hostile("endless", "endless-stream")]),
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey },
    { assets: true },
  );
  pages = await browserPages(gw.url);
}, 180_000);
afterAll(async () => {
  await pages?.close();
  await gw?.close();
  await fleet?.close();
  await upstream?.close();
});

async function chat(model: string, stream: boolean): Promise<Response> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream, max_tokens: 4, messages: [{ role: "user", content: `hello ${Math.random()}` }] }),
  });
  await res.text();
  return res;
}

const metricsText = (): Promise<string> => scrape(gw.url, adminKey);

/** The request line of request `id`, once written. */
async function lineOf(id: string): Promise<RequestLine> {
  let found: RequestLine | undefined;
  await vi.waitFor(() => {
    for (const l of gw.logs) {
      const at = l.indexOf('{"type":"request"');
      if (at < 0) continue;
      const line = JSON.parse(l.slice(at)) as RequestLine;
      if (line.request_id === id) found = line;
    }
    expect(found).toBeDefined();
  }, EVENTUALLY);
  return found as RequestLine;
}

describe("a failed attempt shows what it met", () => {
  const cases = [
    { group: "g-loading", backend: "loading", cause: "unavailable", stream: false },
    { group: "g-500", backend: "crashing", cause: "server-error", stream: false },
    { group: "g-wedged", backend: "wedged", cause: "timeout", stream: true },
    { group: "g-429", backend: "limited", cause: "rate-limited", stream: false },
  ] as const;

  it.each(cases)("$backend: a failover to sim-0, a log line naming $backend and $cause, and kvgate_attempt_failures_total{cause=$cause}", async (c) => {
    const res = await chat(c.group, c.stream);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-backend")).toBe("sim-0");
    expect(res.headers.get("x-kvgate-attempts")).toBe("2");
    const line = await lineOf(res.headers.get("x-request-id") as string);
    expect(line).toMatchObject({ status: 200, attempts: 2, backend: "sim-0", failures: [{ group: c.group, backend: c.backend, cause: c.cause }] });
    await vi.waitFor(async () => {
      const text = await metricsText();
      expect(sample(text, "kvgate_attempt_failures_total", `group="${c.group}",backend="${c.backend}",cause="${c.cause}"`)).toBe(1);
      expect(sample(text, "kvgate_attempt_failures_total", `group="${c.group}",backend="sim-0",cause="${c.cause}"`)).toBe(0);
    }, EVENTUALLY);
  });

  it("a backend nobody listens on, alone in its group: a 502 whose line says it was the connection, and the connect series counts it", async () => {
    const res = await chat("g-dead", false);
    expect(res.status).toBe(502);
    const line = await lineOf(res.headers.get("x-request-id") as string);
    expect(line).toMatchObject({ status: 502, attempts: 1, backend: "dead", error_code: "upstream_error", failures: [{ group: "g-dead", backend: "dead", cause: "connect" }] });
    await vi.waitFor(async () => expect(sample(await metricsText(), "kvgate_attempt_failures_total", 'group="g-dead",backend="dead",cause="connect"')).toBe(1), EVENTUALLY);
  });
});

describe("a backend resting after a 429's Retry-After", () => {
  it("shows its rest in GET /admin/v1/status and on the dashboard, beside its closed breaker", async () => {
    // The group's second request: limited asked for 30 s of rest at its first (the test above), or does now.
    const res = await chat("g-429", false);
    expect(res.status).toBe(200);
    const status = await fetch(`${gw.url}/admin/v1/status`, { headers: { authorization: `Bearer ${adminKey}` } });
    const groups = ((await status.json()) as { groups: StatusGroup[] }).groups;
    const rows = groups.find((g) => g.name === "g-429")?.deploymentRows ?? [];
    const limited = rows.find((r) => r.id === "limited");
    expect(limited?.breaker).toBe("closed");
    const until = Date.parse(limited?.restingUntil ?? "");
    // Retry-After: 30, from a request made within the last seconds.
    expect(until).toBeGreaterThan(Date.now());
    expect(until - Date.now()).toBeLessThanOrEqual(30_000);
    expect(rows.find((r) => r.id === "sim-0")?.restingUntil).toBeNull();

    const page = await pages.dashboard(adminKey, '[data-group="g-429"] tr[data-deployment="limited"]');
    const breaker = (id: string) => page.locator(`[data-group="g-429"] tr[data-deployment="${id}"] [data-field="breaker"]`);
    await expect.poll(() => breaker("limited").textContent(), EVENTUALLY).toMatch(/^closed · resting after a 429 until /);
    expect(await breaker("sim-0").textContent()).toBe("closed");
    await pages.closePages();
  });
});

describe("requests that end early still leave their line", () => {
  it("a body over the limit: a 413 line with its code", async () => {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "g-500", messages: [{ role: "user", content: "x".repeat(5 * 1024 * 1024) }] }),
    });
    expect(res.status).toBe(413);
    const code = ((await res.json()) as { error: { code: string } }).error.code;
    const line = await lineOf(res.headers.get("x-request-id") as string);
    expect(line).toMatchObject({ status: 413, level: "warn", error_code: code, attempts: 0, failures: null });
  });

  it("a client that leaves mid-stream: a 200 line with client_closed_request", async () => {
    const abort = new AbortController();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "g-endless", stream: true, messages: [{ role: "user", content: "go on" }] }),
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    abort.abort();
    const line = await lineOf(res.headers.get("x-request-id") as string);
    expect(line).toMatchObject({ status: 200, backend: "endless", error_code: "client_closed_request", failures: null });
  });
});
