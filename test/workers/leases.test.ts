import { createExecutionContext, evictDurableObject, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import type { GroupStatus, LeaseRelease, LeaseRenewal, RenewalAnswers, RouteCall } from "../../src/routing/protocol.ts";
import type { DeploymentRow, FleetStatus } from "../../src/fleet/admin-api.ts";
import type { IssuedKeyView, UsageView } from "../../src/tenants/admin-api.ts";
import type { Env } from "../../workers/env.ts";
import { holdLease, route, SILENT } from "../../workers/gateway/route-client.ts";
import type { ResolvedGroup } from "../../src/config/resolve.ts";
import { admin, ok } from "./admin.ts";
import { chat, conversation, EVENTUALLY, expectIdle, firstRouteCall, gateway, groupConfig, inFlight, sseEvents, status } from "./gateway.ts";
import { unpackKeys } from "../../src/metrics/key-columns.ts";

const G = "leases";

describe("leases: in-flight counts always return to zero", () => {
  it("after a normal non-streamed and streamed response", async () => {
    const a = await chat(G, conversation("normal"));
    expect(a.status).toBe(200);
    await a.json();
    const b = await chat(G, conversation("normal"), { stream: true, stream_options: { include_usage: true } });
    await b.text();
    await expectIdle(G);
    const s = await status(G);
    expect(s.backends.reduce((n, x) => n + x.completed, 0)).toBeGreaterThanOrEqual(2);
  });

  it("after an upstream error before the first byte", async () => {
    const res = await chat(G, conversation("err"), { kvgate_sim: { fail_status: 500 } });
    expect(res.status).toBe(502);
    await res.text();
    await expectIdle(G);
  });

  it("after the upstream dies mid-stream", async () => {
    const res = await chat(G, conversation("die"), { stream: true, max_tokens: 20, kvgate_sim: { fail_after_chunks: 3 } });
    expect(res.status).toBe(200);
    await sseEvents(res);
    await expectIdle(G);
    expect((await status(G)).backends.reduce((n, b) => n + b.failed, 0)).toBeGreaterThanOrEqual(1);
  });

  it("after the client disconnects mid-stream, which also stops the upstream", async () => {
    const res = await chat(G, conversation("abort"), { stream: true, max_tokens: 1000, kvgate_sim: { chunk_delay_ms: 20 } });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    expect(await inFlight(G)).toBe(1);
    await reader.cancel();
    await expectIdle(G);
    expect((await status(G)).backends.reduce((n, b) => n + b.aborted, 0)).toBe(1);
    // 1,000 tokens 20 ms apart would keep the upstream busy for 20 s: it must stop well before.
    const url = inject("upstreams").fleetUrls[Number(res.headers.get("x-kvgate-backend")?.replace("sim-", ""))] as string;
    await vi.waitFor(async () => expect(await (await fetch(`${url}/metrics`)).text()).toMatch(/^kvgate_sim_requests_running\{[^}]*\} 0$/m), { ...EVENTUALLY, interval: 50 });
  });

  it("after the client disconnects before the upstream answered, which aborts the upstream request", async () => {
    const before = (await status(G)).backends.reduce((n, b) => n + b.aborted, 0);
    const client = new AbortController();
    const pending = chat(G, conversation("impatient"), { kvgate_sim: { first_byte_delay_ms: 20_000 } }, { signal: client.signal });
    await vi.waitFor(async () => expect(await inFlight(G)).toBe(1), { ...EVENTUALLY, interval: 10 });
    client.abort();
    await pending.catch(() => undefined);
    // Released long before the upstream's 20 s delay would have ended.
    await vi.waitFor(async () => expect(await inFlight(G)).toBe(0), EVENTUALLY);
    expect((await status(G)).backends.reduce((n, b) => n + b.aborted, 0)).toBe(before + 1);
  });

  it("reclaims a lease that is never released once it expires", async () => {
    const stub = env.MODEL_GROUP.getByName("short-lease");
    // A Worker killed mid-stream: it took a lease and will never release it.
    const decision = await stub.route(firstRouteCall(groupConfig("short-lease"), [1, 2, 3]));
    if ("refused" in decision) throw new Error(`no route: ${decision.refused}`);
    expect(await inFlight("short-lease")).toBe(1);
    // The expiry alarm armed when the lease was taken fires and reclaims the slot.
    await vi.waitFor(async () => expect(await inFlight("short-lease")).toBe(0), EVENTUALLY);
    const after = await status("short-lease");
    expect(after.backends.reduce((n, b) => n + b.inFlight, 0)).toBe(0);
    expect(after.backends.reduce((n, b) => n + b.expired, 0)).toBe(1);
    // A late release of the reclaimed lease must not push a count below zero.
    await stub.release([{ lease: decision.lease, outcome: "ok" }], []);
    expect(await inFlight("short-lease")).toBe(0);
  });

  it("keeps a slow request's lease past its TTL: the attempt's own timer renews it while the upstream has not answered", async () => {
    const expired = async () => (await status("short-lease")).backends.reduce((n, b) => n + b.expired, 0);
    const before = await expired();
    // Headers after 3 s, ten times the 300 ms TTL: unrenewed, the object would reclaim the slot. (With
    // 1 s, a loaded machine's wait to see it in flight plus the 600 ms below outlasted the answer.)
    const pending = chat("short-lease", conversation("slow"), { kvgate_sim: { first_byte_delay_ms: 3_000 } });
    await vi.waitFor(async () => expect(await inFlight("short-lease")).toBe(1), { ...EVENTUALLY, interval: 10 });
    await new Promise((r) => setTimeout(r, 600)); // twice the TTL: a lease not renewed is gone by then
    expect(await inFlight("short-lease")).toBe(1);
    const res = await pending;
    expect(res.status).toBe(200);
    await res.json();
    await expectIdle("short-lease");
    expect(await expired()).toBe(before);
  });
});

describe("leases across a restart of the Durable Object", () => {
  it("come back from the renewals of the Workers holding them: in-flight returns to the truth and the cap holds", async () => {
    const group = "evicted";
    // Two 4.5 s streams on a backend capped at 2.
    const streams = await Promise.all([0, 1].map((i) => chat(group, conversation(`moulin ${i}`), { stream: true, max_tokens: 150, kvgate_sim: { chunk_delay_ms: 30 } })));
    const readers = streams.map((r) => (r.body as ReadableStream<Uint8Array>).getReader());
    for (const r of readers) await r.read();
    expect(await inFlight(group)).toBe(2);
    await evictDurableObject(env.MODEL_GROUP.getByName(group));
    // The new instance knows no lease until the Workers renew theirs (every leaseTtlMs / 3 = 300 ms).
    await vi.waitFor(async () => {
      const s = await status(group);
      expect(s.backends[0]?.inFlight).toBe(2);
      expect(s.restored.leases).toBe(2);
    }, EVENTUALLY);
    const third = await chat(group, conversation("moulin 2"));
    expect(third.status).toBe(503);
    await third.text();
    for (const r of readers) await r.cancel();
    await expectIdle(group);
    expect((await status(group)).backends[0]?.aborted).toBe(2);
  });

  it("come back as soon as the isolate holding them hears from the new instance, long before their timers: the backend's cap holds", async () => {
    const group = "evicted-busy";
    // Two 20 s streams on a backend capped at 2, whose leases' timers renew them every 10 s.
    const readers = await openStreams(group, ["bief 0", "bief 1"]);
    await evictDurableObject(env.MODEL_GROUP.getByName(group));
    // Routed by a new instance that knows neither stream (what the README says remains: an isolate's calls
    // before its first answer from the new instance); its lease names another incarnation, and the
    // isolate sends both leases at once.
    const first = await chat(group, conversation("bief 2"));
    expect(first.status).toBe(200);
    await first.text();
    const next = await chat(group, conversation("bief 3"));
    expect(next.status, "a request on a backend with two streams, at its cap of 2").toBe(503);
    await next.text();
    const shown = (await ok<{ groups: GroupStatus[] }>(gateway("/v1/kvgate/status"))).groups.find((g) => g.group === group);
    expect(shown?.backends[0]?.inFlight, "in flight on the backend, as /v1/kvgate/status shows it").toBe(2);
    expect(shown?.restored.leases).toBe(2);
    for (const r of readers) await r.cancel();
    await expectIdle(group);
  });

  it("leave a drained server's row unknown, not drained, until every lease had its time to renew: `drain --wait` does not say 'safe to stop' under a stream", async () => {
    const group = "evicted-drain";
    const row = () => ok<DeploymentRow>(admin(`/admin/v1/groups/${group}/deployments/only`));
    // A 20 s stream, its lease renewed by its timer every 10 s.
    const [reader] = await openStreams(group, ["drain restart"]);
    await ok(admin(`/admin/v1/groups/${group}/deployments/only/drain`, { method: "POST" }));
    await vi.waitFor(async () => expect(await row()).toMatchObject({ state: "draining", inFlight: 1, drained: false }), EVENTUALLY);
    // A deploy (or an eviction) restarts the routing object; the stream goes on, unknown to the new instance.
    await evictDurableObject(env.MODEL_GROUP.getByName(group));
    expect(await row(), "the row `drain --wait` polls").toMatchObject({ inFlight: null, drained: false });
    const fleet = await ok<FleetStatus>(admin("/admin/v1/status"));
    expect(fleet.groups.find((g) => g.name === group)?.inFlight).toBeNull();
    const shown = (await ok<{ groups: GroupStatus[] }>(gateway("/v1/kvgate/status"))).groups.find((g) => g.group === group);
    expect(shown?.inFlightKnown).toBe(false);
    expect((await reader?.read())?.done, "the stream still runs").toBe(false);
    await reader?.cancel();
    await ok(admin(`/admin/v1/groups/${group}/deployments/only/enable`, { method: "POST" }));
    await expectIdle(group);
  });

  it("leave an idle drained server's row drained: an object evicted once its leases' time ran out says at once that nothing is in flight", async () => {
    const group = "evicted-idle";
    const stub = env.MODEL_GROUP.getByName(group);
    const row = () => ok<DeploymentRow>(admin(`/admin/v1/groups/${group}/deployments/only`));
    await (await chat(group, conversation("idle restart"))).text();
    await ok(admin(`/admin/v1/groups/${group}/deployments/only/drain`, { method: "POST" }));
    await vi.waitFor(async () => expect(await row()).toMatchObject({ state: "draining", inFlight: 0, drained: true }), EVENTUALLY);
    // Nothing runs, and the time until which the object saved that its leases might run has passed
    // (the runtime evicts a quiet object after a minute or more; its leases' time is 1.5 × leaseTtlMs).
    const liveUntil = () => runInDurableObject(stub, (_o, state) => state.storage.get<number>("live-until"));
    expect(await liveUntil()).toBeGreaterThan(0);
    await vi.waitFor(async () => expect(await liveUntil()).toBeLessThan(Date.now()), EVENTUALLY);
    await evictDurableObject(stub);
    expect(await row(), "the row `drain --wait` polls").toMatchObject({ inFlight: 0, drained: true });
    const shown = (await ok<{ groups: GroupStatus[] }>(gateway("/v1/kvgate/status"))).groups.find((g) => g.group === group);
    expect(shown?.inFlightKnown).toBeUndefined();
    await ok(admin(`/admin/v1/groups/${group}/deployments/only/enable`, { method: "POST" }));
    await expectIdle(group);
  });

  it("cost a quiet group watched by status reads no storage write per request: until when its leases may run is saved once per leaseTtlMs / 2", async () => {
    const group = "quiet-watched";
    const stub = env.MODEL_GROUP.getByName(group);
    const liveUntil = () => runInDurableObject(stub, (_o, state) => state.storage.get<number>("live-until"));
    await (await chat(group, conversation("watched 1"))).text();
    const saved = await liveUntil();
    expect(saved).toBeGreaterThan(Date.now());
    for (const turn of [2, 3, 4]) {
      // An open dashboard's read, between requests, once the last one's lease is given back.
      await expectIdle(group);
      await ok(admin("/admin/v1/status"));
      await (await chat(group, conversation(`watched ${turn}`))).text();
    }
    expect(await liveUntil()).toBe(saved);
  });

  it("come back as soon as the isolate holding them hears from the new instance: a key's max_parallel holds", async () => {
    const group = "evicted-keyed";
    const made = await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: { name: "evicted-keyed", max_parallel: 2 } }), 201);
    const asKey = { headers: { authorization: `Bearer ${made.key}` } };
    const readers = await openStreams(group, ["ecluse 0", "ecluse 1"], asKey);
    await evictDurableObject(env.MODEL_GROUP.getByName(group));
    // Another caller's request tells this isolate the object restarted: the key's next is its third in flight.
    const other = await chat(group, conversation("ecluse 2"));
    expect(other.status).toBe(200);
    await other.text();
    const third = await chat(group, conversation("ecluse 3"), {}, asKey);
    expect(third.status, "a third request of a key whose max_parallel is 2").toBe(429);
    expect(((await third.json()) as { error: { message: string } }).error.message).toContain("its requests in flight at once");
    for (const r of readers) await r.cancel();
    await expectIdle(group);
  });

  it("come back with the release call of an isolate that routes nothing more, when its answer names the new instance", async () => {
    const g = groupConfig("evicted-quiet");
    const ctx = createExecutionContext();
    // Three leases held with no timer to renew them: only a call to the object can carry their renewals.
    const held = [];
    for (let i = 0; i < 3; i++) {
      const d = await route(env, ctx, g, { chain: [], blocks: 0 }, [], g.name);
      if ("refused" in d) throw new Error(`refused: ${d.refused}`);
      held.push(holdLease(d, g, env, ctx, 10));
    }
    await evictDurableObject(env.MODEL_GROUP.getByName(g.name));
    // One ends: its release goes alone, and the new instance's answer to it tells the isolate it restarted.
    held[2]?.settle("ok");
    await vi.waitFor(async () => {
      const s = await status(g.name);
      expect(s.backends[0]?.inFlight).toBe(2);
      expect(s.restored.leases).toBe(2);
    }, EVENTUALLY);
    for (const h of held) h.settle("ok");
    await expectIdle(g.name);
    await waitOnExecutionContext(ctx);
  });

  it("an object of an earlier release, whose release answers name no incarnation, is called no more than before", async () => {
    const g = groupConfig("evicted-quiet");
    const ctx = createExecutionContext();
    const earlier = scriptedObjects({
      release: async (_n, go) => {
        const { spent, unheld } = (await go()) as RenewalAnswers;
        return { spent, unheld };
      },
    });
    const held = [];
    for (let i = 0; i < 2; i++) {
      const d = await route(earlier.env, ctx, g, { chain: [], blocks: 0 }, [], g.name);
      if ("refused" in d) throw new Error(`refused: ${d.refused}`);
      held.push(holdLease(d, g, earlier.env, ctx, 10));
    }
    held[0]?.settle("ok");
    await vi.waitFor(async () => expect(await inFlight(g.name)).toBe(1), EVENTUALLY);
    held[1]?.settle("ok");
    await expectIdle(g.name);
    await waitOnExecutionContext(ctx);
    // One release call a lease, each alone: no renewal was due, and none was sent.
    expect(earlier.releases()).toBe(2);
  });

  it("a key whose usage is not recorded is charged nothing by the new instance: not a release it does not hold, nor a lease it took back from its renewal", async () => {
    const g = groupConfig("evicted-quiet");
    const ctx = createExecutionContext();
    const made = (json: Record<string, unknown>) => ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json }), 201);
    const [quiet, tracked] = [await made({ name: "unrecorded", track_usage: false }), await made({ name: "recorded, after it" })];
    const tenant = (id: string, recordsUsage: boolean) => ({ id, rpm: null, tpm: null, maxParallel: null, budget: null, admitted: false, recordsUsage });
    const hold = async (id: string, recordsUsage: boolean) => {
      const d = await route(env, ctx, g, { chain: [], blocks: 0 }, [], g.name, tenant(id, recordsUsage));
      if ("refused" in d) throw new Error(`refused: ${d.refused}`);
      return holdLease(d, g, env, ctx, 10, id);
    };
    const held = [await hold(quiet.id, false), await hold(quiet.id, false)];
    await evictDurableObject(env.MODEL_GROUP.getByName(g.name));
    // One ends with the usage read for its group's feedback (a sampled request); the new instance does not hold it, and its answer
    // tells the isolate it restarted: the other lease's renewal goes at once, and is taken back.
    held[0]?.settle("ok", { usage: { prompt: 10, completion: 5, cached: 0 } });
    await vi.waitFor(async () => expect((await status(g.name)).restored.leases).toBe(1), EVENTUALLY);
    held[1]?.settle("ok");
    // A recorded key's request ends after them: once its usage is stored, theirs was sent too, were there any.
    (await hold(tracked.id, true)).settle("ok", { usage: { prompt: 3, completion: 2, cached: 0 } });
    await vi.waitFor(async () => expect(await ok<UsageView>(admin(`/admin/v1/usage?key=${tracked.id}`))).toMatchObject({ requests: 1, prompt_tokens: 3 }), EVENTUALLY);
    expect(await ok<UsageView>(admin(`/admin/v1/usage?key=${quiet.id}`))).toMatchObject({ requests: 0, prompt_tokens: 0, completion_tokens: 0 });
    const counted = unpackKeys(await env.MODEL_GROUP.getByName(g.name).metrics()).keys.find((k) => k.id === quiet.id);
    expect(counted?.tokens ?? { prompt: 0, completion: 0 }).toMatchObject({ prompt: 0, completion: 0 });
    await expectIdle(g.name);
    await waitOnExecutionContext(ctx);
  });

  it("a release the new instance does not hold still counts its virtual key's usage", async () => {
    const group = "evicted-usage";
    const made = await ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: { name: "evicted" } }), 201);
    const res = await chat(group, conversation("restarted usage"), { stream: true, max_tokens: 20, stream_options: { include_usage: true }, kvgate_sim: { chunk_delay_ms: 30 } }, { headers: { authorization: `Bearer ${made.key}` } });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value, { stream: true });
    // Evicted mid-stream; the stream ends long before its lease's first renewal could reach the new instance.
    await evictDurableObject(env.MODEL_GROUP.getByName(group));
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += decoder.decode(r.value, { stream: true });
    const chunks = text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice("data: ".length)) as { usage?: { prompt_tokens: number; completion_tokens: number } });
    const usage = chunks.findLast((c) => c.usage)?.usage;
    if (!usage) throw new Error("the stream carried no usage");
    expect(usage.completion_tokens).toBe(20);
    await vi.waitFor(async () => {
      const counted = await ok<UsageView>(admin(`/admin/v1/usage?key=${made.id}`));
      expect(counted).toMatchObject({ requests: 1, prompt_tokens: usage.prompt_tokens, completion_tokens: 20 });
    }, EVENTUALLY);
    const s = await status(group);
    expect(s.restored.leases).toBe(0);
    expect(s.backends[0]).toMatchObject({ inFlight: 0, completed: 0 });
  });
});

/** Streams of 1,000 tokens 20 ms apart (20 s) on `group`, each past its first chunk: their leases are held. */
async function openStreams(group: string, topics: string[], init: RequestInit = {}): Promise<ReadableStreamDefaultReader<Uint8Array>[]> {
  const streams = await Promise.all(topics.map((t) => chat(group, conversation(t), { stream: true, max_tokens: 1000, kvgate_sim: { chunk_delay_ms: 20 } }, init)));
  for (const s of streams) expect(s.status).toBe(200);
  const readers = streams.map((r) => (r.body as ReadableStream<Uint8Array>).getReader());
  for (const r of readers) await r.read();
  expect(await inFlight(group)).toBe(topics.length);
  return readers;
}

const overloaded = () => Promise.reject(new Error("Durable Object is overloaded. Too many requests queued."));
const reset = () => Promise.reject(new Error("Durable Object reset because its code was updated."));

/**
 * The gateway's env with a MODEL_GROUP whose calls go to the real objects unless `script` answers
 * them otherwise (the `n`th call of its kind, from 1): a call to an overloaded object, or one being
 * reset in a deploy, fails. The runtime has no way to make a real Durable Object call fail on cue.
 */
function scriptedObjects(script: { route?: (n: number, call: () => Promise<unknown>) => Promise<unknown>; release?: (n: number, call: () => Promise<unknown>) => Promise<unknown> }): { env: Env; routes: () => number; releases: () => number } {
  let routes = 0;
  let releases = 0;
  const namespace = {
    getByName(name: string) {
      const stub = env.MODEL_GROUP.getByName(name);
      return {
        route: (call: RouteCall) => (script.route ?? ((_n, go) => go()))(++routes, () => stub.route(call)),
        release: (released: LeaseRelease[], renewed: LeaseRenewal[]) => (script.release ?? ((_n, go) => go()))(++releases, () => stub.release(released, renewed)),
      };
    },
  };
  return { env: { ...env, MODEL_GROUP: namespace as unknown as Env["MODEL_GROUP"] }, routes: () => routes, releases: () => releases };
}

/** The first `failures` release calls fail, as a call to an overloaded object does. */
const failingReleases = (failures: number) => {
  const s = scriptedObjects({ release: (n, go) => (n <= failures ? overloaded() : go()) });
  return { env: s.env, failed: () => Math.min(s.releases(), failures) };
};

/** The second route call fails: the first reached the object, which processes the releases it carries before it looks at the version. */
const secondRouteFails = () => {
  const s = scriptedObjects({ route: (n, go) => (n === 2 ? reset() : go()) });
  return { env: s.env, calls: s.routes };
};

/** The first `failures` route calls fail after `afterMs`, as a call to an object being reset does. */
const failingRoutes = (failures: number, afterMs: number) =>
  scriptedObjects({ route: (n, go) => (n <= failures ? new Promise((r) => setTimeout(r, afterMs)).then(reset) : go()) }).env;

describe("releases whose flush failed", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("are sent again by the isolate, which has no other call for that object to carry them", async () => {
    const g = groupConfig("release-retry");
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const flaky = failingReleases(1);
    const ctx = createExecutionContext();
    const d = await route(flaky.env, ctx, g, { chain: [], blocks: 0 }, [], g.name);
    if ("refused" in d) throw new Error(`refused: ${d.refused}`);
    holdLease(d, g, flaky.env, ctx, 10).settle("ok");
    await vi.waitFor(() => expect(flaky.failed()).toBeGreaterThanOrEqual(1), EVENTUALLY);
    // Back long before the lease's 30 s TTL, as a release and not an expiry.
    await vi.waitFor(async () => expect(await inFlight(g.name)).toBe(0), EVENTUALLY);
    expect((await status(g.name)).backends[0]).toMatchObject({ completed: 1, expired: 0 });
    await waitOnExecutionContext(ctx);
    expect(errors.mock.calls.flat().join("\n")).toContain("releasing 1 and renewing 0 lease(s) of release-retry failed: Durable Object is overloaded");
  });

  it("are not sent again when the object took them, though the route call failed after: a key's usage counts once", async () => {
    const g = groupConfig("release-retry");
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const ctx = createExecutionContext();
    const tenant = { id: "key_twice", rpm: null, tpm: null, maxParallel: null, budget: null, admitted: false };
    const d = await route(env, ctx, g, { chain: [], blocks: 0 }, [], g.name, tenant);
    if ("refused" in d) throw new Error(`refused: ${d.refused}`);
    // A key's request ends with its usage, and the isolate's next call takes its release along before its flush is due.
    holdLease(d, g, env, ctx, 10, "key_twice").settle("ok", { usage: { prompt: 10, completion: 5, cached: 0 } });
    // That call names a version the object does not know yet: it takes the release, asks for the config, and the call with it fails.
    const flaky = secondRouteFails();
    await expect(route(flaky.env, ctx, { ...g, version: `${g.version}-next` }, { chain: [], blocks: 0 }, [], g.name)).rejects.toThrow("routing for model");
    expect(flaky.calls()).toBe(2);
    // Once every flush and try again the isolate armed has run (they run under the request's
    // waitUntil): a fixed sleep let a resend that came later pass unseen.
    await waitOnExecutionContext(ctx);
    const key = unpackKeys(await env.MODEL_GROUP.getByName(g.name).metrics()).keys.find((k) => k.id === "key_twice");
    expect(key?.tokens).toMatchObject({ prompt: 10, completion: 5 });
  });

  it("are sent again when the route call they rode along with failed, though no other call comes", async () => {
    const g = groupConfig("release-retry");
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const ctx = createExecutionContext();
    const d = await route(env, ctx, g, { chain: [], blocks: 0 }, [], g.name);
    if ("refused" in d) throw new Error(`refused: ${d.refused}`);
    // It ends, and before its flush is due the next request's route call takes it along: that call fails
    // after the flush found nothing to send (the next request then fails over elsewhere, or fails).
    holdLease(d, g, env, ctx, 10).settle("ok");
    const flaky = failingRoutes(1, 50);
    await expect(route(flaky, ctx, g, { chain: [], blocks: 0 }, [], g.name)).rejects.toThrow("routing for model");
    // Back long before the lease's 30 s TTL, as a release and not an expiry.
    await vi.waitFor(async () => expect(await inFlight(g.name)).toBe(0), EVENTUALLY);
    expect((await status(g.name)).backends[0]).toMatchObject({ expired: 0 });
    await waitOnExecutionContext(ctx);
  });
});

describe("a lease whose answer began while a renewal of it was on its way to the object", () => {
  it("tells the object so with a later renewal: the backend served, and a silent one's timeout beside it is that one's own", async () => {
    // short-lease's backends (renewed every 100 ms), round-robin: the first lease on one, the second on another.
    const base = groupConfig("short-lease");
    const g: ResolvedGroup = { ...base, name: "serving-told-late", strategy: "round-robin" };
    const ctx = createExecutionContext();
    // Each release call goes to the object as it is made; the answer to one that renews is held back once, until let go.
    let letGo: (() => void) | undefined;
    let holdNext = false;
    const objects = scriptedObjects({
      release: (_n, go) => {
        const answer = go();
        if (!holdNext) return answer;
        holdNext = false;
        return new Promise((resolve) => (letGo = () => resolve(answer)));
      },
    });
    const routed = async () => {
      const d = await route(objects.env, ctx, g, { chain: [], blocks: 0 }, [], g.name);
      if ("refused" in d) throw new Error(`refused: ${d.refused}`);
      return d;
    };
    const serving = holdLease(await routed(), g, objects.env, ctx, 10);
    holdNext = true;
    serving.keepRenewed();
    await vi.waitFor(() => expect(letGo).toBeDefined(), EVENTUALLY);
    // Its first token comes while that renewal is on its way (sent without it), then the object answers it.
    serving.began();
    letGo?.();
    const after = objects.releases();
    await vi.waitFor(() => expect(objects.releases()).toBeGreaterThanOrEqual(after + 2), EVENTUALLY);
    // A request on the other backend, cut at its timeout having had nothing from it: silent while the first served.
    const silent = holdLease(await routed(), g, objects.env, ctx, 10);
    expect(silent.backendId).not.toBe(serving.backendId);
    silent.settle("client-abort", SILENT);
    await vi.waitFor(async () => expect(await inFlight(g.name)).toBe(1), EVENTUALLY);
    const other = (await status(g.name)).backends.find((b) => b.id === silent.backendId);
    expect([other?.failed, other?.aborted]).toEqual([1, 0]);
    serving.settle("ok");
    await expectIdle(g.name);
    await waitOnExecutionContext(ctx);
  });
});
