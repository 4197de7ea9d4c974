import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, inject, it, vi } from "vitest";
import type { IssuedKeyView, UsageView } from "../../src/tenants/admin-api.ts";
import { sample } from "../support/metrics-scrape.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { admin, ok } from "./admin.ts";
import { chat, conversation, EVENTUALLY, expectIdle, gateway, sseEvents, status } from "./gateway.ts";

const [breakerUpstream, rateLimitedUpstream] = inject("upstreams").switchableUrls as [string, string];
const fleet = inject("upstreams").fleetUrls;

async function setMode(url: string, mode: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${url}/__mode`, { method: "POST", body: JSON.stringify(mode) });
  expect(res.status).toBe(204);
}

async function upstreamCount(url: string): Promise<{ inference: number; health: number }> {
  return (await (await fetch(`${url}/__count`)).json()) as { inference: number; health: number };
}

const breakerOf = async (group: string, id: string) => (await status(group)).backends.find((b) => b.id === id)?.breaker;

describe("failover before the first byte", () => {
  it("retries a refused connection on the next backend and says so", async () => {
    // Round-robin: the first request goes to the dead backend, then fails over to the healthy one.
    const res = await chat("failover-dead", conversation("fjords"));
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-backend")).toBe("healthy");
    expect(res.headers.get("x-kvgate-reason")).toBe("failover");
    expect(res.headers.get("x-kvgate-attempts")).toBe("2");
    expect((await res.json()) as { choices: unknown[] }).toHaveProperty("choices");
    await expectIdle("failover-dead");
  });

  it("opens the dead backend's circuit after consecutive failures; then nothing is sent to it", async () => {
    for (let i = 0; i < 3; i++) await (await chat("failover-dead", conversation(`moraine ${i}`))).text();
    await vi.waitFor(async () => expect((await breakerOf("failover-dead", "dead"))?.state).toBe("open"), EVENTUALLY);
    for (let i = 0; i < 6; i++) {
      const res = await chat("failover-dead", conversation(`cirque ${i}`));
      await res.text();
      expect(res.headers.get("x-kvgate-attempts")).toBe("1");
      expect(res.headers.get("x-kvgate-backend")).toBe("healthy");
    }
    const dead = (await status("failover-dead")).backends.find((b) => b.id === "dead");
    // Its probes keep failing (nothing listens), so it stays open and sees no request.
    expect(dead?.breaker.state).toBe("open");
    expect(dead?.inFlight).toBe(0);
    await expectIdle("failover-dead");
  });

  it("does not retry when failover is off: the client gets the 502", async () => {
    const res = await chat("failover-off", conversation("eskers"));
    expect(res.status).toBe(502);
    expect(res.headers.get("x-kvgate-attempts")).toBe("1");
    const body = (await res.json()) as { error: { type: string; code: string } };
    expect(body.error.type).toBe("upstream_error");
    await expectIdle("failover-off");
  });

  it("says it made no attempt when no backend was left to try", async () => {
    const failed = await chat("failover-none-left", conversation("kettles"));
    expect([failed.status, failed.headers.get("x-kvgate-attempts")]).toEqual([502, "1"]);
    await failed.text();
    await vi.waitFor(async () => expect((await breakerOf("failover-none-left", "dead"))?.state).toBe("open"), EVENTUALLY);
    const res = await chat("failover-none-left", conversation("kames"));
    const body = (await res.json()) as { error: { message: string } };
    expect([res.status, res.headers.get("x-kvgate-attempts")]).toEqual([503, "0"]);
    expect(body.error.message).toMatch(/no healthy backend/);
    await expectIdle("failover-none-left");
  });

  it("waits out a short Retry-After on 429 and retries elsewhere; a long one is not waited for: the other backend is asked at once", async () => {
    await setMode(rateLimitedUpstream, { mode: "429", retryAfter: "0.05" });
    const res = await chat("failover-429", conversation("drumlins"));
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-attempts")).toBe("2");
    expect(res.headers.get("x-kvgate-backend")).toBe("healthy");
    await res.text();
    // The backend asked for 50 ms, and is spared for them while the other has room.
    await new Promise((r) => setTimeout(r, 100));

    await setMode(rateLimitedUpstream, { mode: "429", retryAfter: "30" });
    // Round-robin alternates: within two requests one goes first to the rate-limited backend.
    const answers: [number, string | null][] = [];
    for (let i = 0; i < 2; i++) {
      const r = await chat("failover-429", conversation(`kames ${i}`));
      await r.text();
      answers.push([r.status, r.headers.get("x-kvgate-attempts")]);
    }
    expect(answers).toContainEqual([200, "2"]);
    expect(answers.every(([status]) => status === 200)).toBe(true);
    // Rate limiting is load, not failure: the backend's circuit stays closed.
    expect((await breakerOf("failover-429", "flaky"))?.state).toBe("closed");
    await setMode(rateLimitedUpstream, { mode: "ok" });
    await expectIdle("failover-429");
  });

  it("says in x-kvgate-overhead-ms the gateway's own time for the answer, not the failed attempt's nor the Retry-After waited after it", async () => {
    await setMode(rateLimitedUpstream, { mode: "429", retryAfter: "1" });
    const group = "failover-overhead";
    const deployments = [
      { id: "flaky", baseUrl: rateLimitedUpstream, model: UPSTREAM_MODEL },
      { id: "healthy", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL },
    ];
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, strategy: "round-robin", failover: { retryAfterCapMs: 2000 }, deployments } }), 201);
    const answers: [string | null, number][] = [];
    // Round-robin alternates: within two requests one goes first to the rate-limited backend.
    for (let i = 0; i < 2; i++) {
      const r = await chat(group, conversation(`eskers ${i}`));
      await r.text();
      answers.push([r.headers.get("x-kvgate-attempts"), Number(r.headers.get("x-kvgate-overhead-ms"))]);
    }
    await setMode(rateLimitedUpstream, { mode: "ok" });
    const failedOver = answers.find(([attempts]) => attempts === "2");
    expect(failedOver).toBeDefined();
    // The second attempt went out only after the 1,000 ms the first one's 429 asked for.
    expect(failedOver?.[1]).toBeLessThan(1000);
    await expectIdle(group);
  });

  it("never retries once bytes reached the client: a stream cut mid-way ends with an SSE error event", async () => {
    const res = await chat("failover-dead", conversation("tarns"), { stream: true, kvgate_sim: { fail_after_chunks: 2 } });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-attempts")).toBe("1");
    const events = await sseEvents(res);
    expect(events.at(-1)).toContain('"code":"upstream_stream_error"');
    await expectIdle("failover-dead");
  });
});

describe("circuit breaker", () => {
  it("opens on failures, probes while open, half-opens when probes pass, closes after good trials", async () => {
    await setMode(breakerUpstream, { mode: "fail" });
    // Every request still succeeds: the failing backend's 500s fail over to the healthy one.
    for (let i = 0; i < 4; i++) {
      const res = await chat("failover-breaker", conversation(`sastrugi ${i}`));
      expect(res.status).toBe(200);
      await res.text();
    }
    await vi.waitFor(async () => expect((await breakerOf("failover-breaker", "flaky"))?.state).toBe("open"), EVENTUALLY);
    // Probes (GET /health, every ~50 ms) fail while it is down.
    const atOpen = await upstreamCount(breakerUpstream);
    await vi.waitFor(async () => expect((await upstreamCount(breakerUpstream)).health).toBeGreaterThanOrEqual(atOpen.health + 2), EVENTUALLY);
    for (let i = 0; i < 4; i++) await (await chat("failover-breaker", conversation(`nunatak ${i}`))).text();
    // While open it got probes only, no inference request.
    expect((await upstreamCount(breakerUpstream)).inference).toBe(atOpen.inference);

    await setMode(breakerUpstream, { mode: "ok" });
    // A good probe half-opens it; trials and probes then close it (closeAfterSuccesses 2).
    await vi.waitFor(
      async () => {
        await (await chat("failover-breaker", conversation("serac"))).text();
        expect((await breakerOf("failover-breaker", "flaky"))?.state).toBe("closed");
      },
      { ...EVENTUALLY, interval: 30 },
    );
    const shares = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const res = await chat("failover-breaker", conversation(`bergschrund ${i}`));
      await res.text();
      shares.add(res.headers.get("x-kvgate-backend") ?? "");
    }
    expect(shares).toEqual(new Set(["flaky", "healthy"]));
    expect((await breakerOf("failover-breaker", "flaky"))?.opened).toBeGreaterThanOrEqual(1);
    await expectIdle("failover-breaker");
  });
});

describe("fallback groups and timeouts", () => {
  it("falls back to another group when no backend of the model's group can serve", async () => {
    const res = await chat("fallback-primary", conversation("polynya"));
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-group")).toBe("fallback-target");
    expect(res.headers.get("x-kvgate-reason")).toBe("failover");
    await res.text();
    await expectIdle("fallback-primary");
    await expectIdle("fallback-target");
  });

  it("keeps a virtual key to its models: a fallback group the key may not use is skipped", async () => {
    const keyFor = async (models: string[]) => (await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: { models } }), 201)).key;
    const asKey = (key: string, topic: string) => chat("fallback-primary", conversation(topic), {}, { headers: { authorization: `Bearer ${key}` } });

    // The primary's own failure, as a key that may use no other group gets it: no answer from the fallback.
    const confined = await asKey(await keyFor(["fallback-primary"]), "sastrugi");
    const error = (await confined.json()) as { error: { type: string } };
    expect(confined.status).toBe(502);
    expect(error.error.type).toBe("upstream_error");
    expect(confined.headers.get("x-kvgate-group")).toBeNull();
    expect(confined.headers.get("x-kvgate-attempts")).toBe("1");

    // A key that lists the fallback (by name) or every model is served by it, as the master key is.
    for (const models of [["fallback-primary", "fallback-target"], []]) {
      const res = await asKey(await keyFor(models), `pingo ${models.length}`);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvgate-group")).toBe("fallback-target");
      await res.text();
    }
    await expectIdle("fallback-primary");
    await expectIdle("fallback-target");
  });

  it("counts a key's request served by a fallback group once in kvgate_key_requests_total, where it first got a backend, as /admin/v1/usage counts it", async () => {
    const { fleetUrls, deadUrl } = inject("upstreams");
    // The primary's one backend fails the first request, and its breaker, open from then on, gives the second none.
    const breaker = { consecutiveFailures: 1, openMs: 600_000, probeIntervalMs: 600_000 };
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "counted-target", deployments: [{ id: "healthy", baseUrl: fleetUrls[0] as string, model: UPSTREAM_MODEL }] } }), 201);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "counted-primary", fallbacks: ["counted-target"], breaker, deployments: [{ id: "dead", baseUrl: deadUrl, model: UPSTREAM_MODEL }] } }), 201);
    const { key, id } = await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: {} }), 201);
    for (const topic of ["frazil", "grease ice"]) {
      const res = await chat("counted-primary", conversation(topic), {}, { headers: { authorization: `Bearer ${key}` } });
      expect(res.headers.get("x-kvgate-group")).toBe("counted-target");
      await res.text();
    }
    await expectIdle("counted-primary");
    await expectIdle("counted-target");
    const metrics = await (await gateway("/metrics", { headers: { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } }, false)).text();
    const counted = (group: string) => sample(metrics, "kvgate_key_requests_total", `group="${group}",key="${id}"`) ?? 0;
    // The first in the primary, whose backend it got before it failed there; the second in the fallback group, the first to give it one.
    expect([counted("counted-primary"), counted("counted-target")]).toEqual([1, 1]);
    await vi.waitFor(async () => expect((await ok<UsageView>(admin(`/admin/v1/usage?key=${id}`))).requests).toBe(2), EVENTUALLY);
  });

  it("cuts a stream that stalls between chunks with an SSE error event, and frees its slot", async () => {
    const res = await chat("stall", conversation("katabatic"), { stream: true, max_tokens: 20, kvgate_sim: { stall_after_chunks: 2 } });
    expect(res.status).toBe(200);
    const events = await sseEvents(res);
    expect(events.filter((e) => e.includes('"delta"')).length).toBeGreaterThanOrEqual(2);
    expect(events.at(-1)).toContain('"code":"upstream_stream_stalled"');
    await expectIdle("stall");
  });

  it("answers 504 when the request outlives its total timeout", async () => {
    const res = await chat("total-timeout", conversation("firn"), { kvgate_sim: { first_byte_delay_ms: 2000 } });
    expect(res.status).toBe(504);
    const body = (await res.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("timeout_error");
    expect(body.error.message).toContain("total timeout");
    await expectIdle("total-timeout");
    // The gateway's own deadline is no verdict on the backend: nothing counts toward its breaker.
    const backend = (await status("total-timeout")).backends[0];
    expect(backend?.failed).toBe(0);
    expect(backend?.aborted).toBe(1);
  });

  it("cuts a stream that outlives its total timeout with an SSE error event, without blaming the backend", async () => {
    const before = (await status("total-timeout")).backends[0];
    // 200 tokens 20 ms apart: a 4 s stream against a 300 ms deadline.
    const res = await chat("total-timeout", conversation("sérac"), { stream: true, max_tokens: 200, kvgate_sim: { chunk_delay_ms: 20 } });
    expect(res.status).toBe(200);
    const events = await sseEvents(res);
    expect(events.length).toBeLessThan(100);
    expect(events.at(-1)).toContain("total timeout");
    expect(events.at(-1)).toContain('"code":"upstream_stream_error"');
    await expectIdle("total-timeout");
    const after = (await status("total-timeout")).backends[0];
    expect(after?.failed).toBe(before?.failed);
    expect(after?.aborted).toBe((before?.aborted ?? 0) + 1);
  });
});

describe("durable routing state", () => {
  it("routes a conversation back to its backend after the Durable Object was evicted", async () => {
    const home = await chat("durable", conversation("ablation", 1));
    await home.text();
    const backend = home.headers.get("x-kvgate-backend");
    await expectIdle("durable");
    const stub = env.MODEL_GROUP.getByName("durable");
    // The snapshot is written by the alarm, snapshotIntervalMs (20 ms) after routing: wait until it
    // is stored (a loaded machine's alarm can run later than a fixed sleep), then evict.
    const savedPieces = () => runInDurableObject(stub, async (_o, state) => (await state.storage.list({ prefix: "affinity:" })).size);
    await vi.waitFor(async () => expect(await savedPieces()).toBeGreaterThan(0), EVENTUALLY);
    await evictDurableObject(stub);

    const after = await status("durable");
    expect(after.calls.route).toBe(0);
    expect(after.restored.affinityBlocks).toBeGreaterThan(0);
    for (let turns = 2; turns <= 3; turns++) {
      const res = await chat("durable", conversation("ablation", turns));
      await res.text();
      expect(res.headers.get("x-kvgate-backend")).toBe(backend);
      expect(res.headers.get("x-kvgate-reason")).toBe("prefix-hit");
    }
    await expectIdle("durable");
  });

  it("restores an open circuit after eviction", async () => {
    for (let i = 0; i < 3; i++) await (await chat("durable-breaker", conversation(`ogive ${i}`))).text();
    await vi.waitFor(async () => expect((await breakerOf("durable-breaker", "dead"))?.state).toBe("open"), EVENTUALLY);
    await evictDurableObject(env.MODEL_GROUP.getByName("durable-breaker"));
    const after = await status("durable-breaker");
    expect(after.restored.breakers).toBe(1);
    expect(after.backends.find((b) => b.id === "dead")?.breaker.state).toBe("open");
    const res = await chat("durable-breaker", conversation("ogive x"));
    await res.text();
    expect(res.headers.get("x-kvgate-attempts")).toBe("1");
    await expectIdle("durable-breaker");
  });
});
