import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import { DeploymentSchema, GroupSettingsSchema } from "../../src/config/schema.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import type { GroupRecord } from "../../src/fleet/registry.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { chat, conversation, EVENTUALLY, gateway, inFlight, status } from "./gateway.ts";

/**
 * An exception in the gateway's own code once the upstream answered: here, the answer's
 * x-kvgate-backend header, which the runtime refuses to build for a deployment id holding a line
 * feed. The fleet refuses such an id now, but a registry may hold one it stored before (a
 * heartbeat or the admin API took one until then): the group is written into the registry's
 * SQLite as it stored it, and the registry evicted so that it loads it. The client gets the usual
 * 500; the lease is released with no verdict on the backend, and the upstream is cancelled.
 */

const GROUP = "stored-line-feed";
/** The same server under a model it does not serve: its realtime endpoint answers 404, a failed handshake. */
const WRONG_MODEL_GROUP = "stored-line-feed-wrong-model";
// One simulated server of the four, to read its running requests.
const upstream = inject("upstreams").fleetUrls[3] as string;

async function storeGroups(): Promise<void> {
  const registry = env.FLEET.getByName(REGISTRY_NAME);
  await runInDurableObject(registry, (_o, state) => {
    const { sql } = state.storage;
    const rev = Number(sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'rev'").toArray()[0]?.v ?? 0);
    for (const [name, model] of [
      [GROUP, UPSTREAM_MODEL],
      [WRONG_MODEL_GROUP, "not-served-here"],
    ] as const) {
      const pos = sql.exec<{ n: number }>("SELECT count(*) AS n FROM groups").one().n;
      const spec = { ...DeploymentSchema.parse({ baseUrl: upstream, model }), id: "gpu\nstored" };
      const record: GroupRecord = { settings: GroupSettingsSchema.parse({ name }), source: "admin", rev, deployments: [{ spec, state: "active", source: "admin", expiresAt: null, removeAt: null, ttlMs: null }] };
      sql.exec("INSERT INTO groups (name, record, pos) VALUES (?, ?, ?)", name, JSON.stringify(record), pos);
    }
  });
  await evictDurableObject(registry);
}

const running = async () => Number(/^kvgate_sim_requests_running\{[^}]*\} (\d+)$/m.exec(await (await fetch(`${upstream}/metrics`)).text())?.[1]);

/** `attempts`: the x-kvgate-attempts a request's answer carries, as every answer to a request that reached its group does. */
async function internalError(res: Response, attempts?: string): Promise<void> {
  expect(res.status).toBe(500);
  if (attempts !== undefined) expect(res.headers.get("x-kvgate-attempts")).toBe(attempts);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("internal_error");
}

describe("an exception in the gateway's own code after the upstream answered", () => {
  it("a stream: 500, its lease released (no verdict on the backend) and the upstream cancelled, not held and renewed for the isolate's life; its request line written", async () => {
    await storeGroups();
    const logged = vi.spyOn(console, "log");
    // 1,000 tokens 20 ms apart: 20 s of upstream work unless it is cancelled.
    await internalError(await chat(GROUP, conversation("line feed stream"), { stream: true, max_tokens: 1000, kvgate_sim: { chunk_delay_ms: 20 } }, { headers: { "x-request-id": "stream-exception" } }), "1");
    const line = () => logged.mock.calls.map(([l]) => String(l)).find((l) => l.includes('"request_id":"stream-exception"'));
    await vi.waitFor(() => expect(JSON.parse(line() ?? "null")).toMatchObject({ type: "request", status: 500, error_code: "internal_error" }), EVENTUALLY);
    logged.mockRestore();
    await vi.waitFor(async () => expect(await inFlight(GROUP)).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await running()).toBe(0), { ...EVENTUALLY, interval: 50 });
    expect((await status(GROUP)).backends[0]).toMatchObject({ completed: 0, failed: 0, aborted: 1, breaker: { state: "closed" } });
  });

  it("a whole answer, and an upstream failure: 500, and the lease released as abandoned, neither served nor held", async () => {
    await internalError(await chat(GROUP, conversation("line feed whole")), "1");
    await internalError(await chat(GROUP, conversation("line feed failure"), { kvgate_sim: { fail_status: 500 } }), "1");
    await vi.waitFor(async () => expect(await inFlight(GROUP)).toBe(0), EVENTUALLY);
    expect((await status(GROUP)).backends[0]).toMatchObject({ completed: 0, failed: 0, aborted: 3 });
  });

  it("a realtime handshake the upstream accepted, and one it refused: 500, the lease released as abandoned, not held and renewed for the isolate's life", async () => {
    // The headers every WebSocket client sends (RFC 6455), without which the handshake is refused before routing.
    const handshake = { upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" };
    await internalError(await gateway(`/v1/realtime?model=${GROUP}`, { headers: { ...handshake, "sec-websocket-protocol": "realtime" } }));
    await internalError(await gateway(`/v1/realtime?model=${WRONG_MODEL_GROUP}`, { headers: handshake }));
    await vi.waitFor(async () => expect(await inFlight(GROUP)).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await inFlight(WRONG_MODEL_GROUP)).toBe(0), EVENTUALLY);
    expect((await status(GROUP)).backends[0]).toMatchObject({ completed: 0, failed: 0, aborted: 4 });
    expect((await status(WRONG_MODEL_GROUP)).backends[0]).toMatchObject({ completed: 0, failed: 0, aborted: 1, breaker: { state: "closed" } });
  });
});
