import { createExecutionContext, evictDurableObject, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import OpenAI from "openai";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { FleetRegistry } from "../../durable-objects/fleet-registry.ts";
import { DeploymentSchema, type GatewayConfigInput } from "../../src/config/schema.ts";
import type { DeploymentRow, FleetStatus } from "../../src/fleet/admin-api.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import { objectNamesOf } from "../../src/sharding/partition.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { VPC_HOST } from "../support/vpc-stand-in.ts";
import type { Env } from "../../workers/env.ts";
import worker from "../../workers/gateway/index.ts";
import { admin, ok } from "./admin.ts";
import { chat, EVENTUALLY, expectIdle, firstRouteCall, gateway, groupConfig, routeCall, sseEvents, status } from "./gateway.ts";
import { storeAsBefore, storedGroup } from "./stored-fleet.ts";

/**
 * GPU servers in a private network, reached through a Workers VPC binding with Cloudflare Access
 * service-token headers. GPU_VPC is a stand-in (test/support/vpc-stand-in.ts): a second Worker
 * behind a service binding, since Workers VPC needs a Cloudflare account. It answers only for
 * its private address and only with the token, so an answer proves the path and the headers.
 */

const ask = [{ role: "user" as const, content: "Hello over the tunnel" }];
const fleet = inject("upstreams").fleetUrls;

afterEach(() => {
  vi.restoreAllMocks();
});

describe("a deployment behind a VPC binding", () => {
  it("is fetched through env[binding].fetch with the Access headers, streamed or not", async () => {
    const res = await chat("vpc", ask);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-backend")).toBe("gpu-private");
    const body = (await res.json()) as { choices: { message: { content: string } }[]; model: string };
    expect(body.choices[0]?.message.content).toBe(`reached ${VPC_HOST} through the binding`);
    expect(body.model).toBe(UPSTREAM_MODEL);

    const streamed = await chat("vpc", ask, { stream: true });
    expect(streamed.status).toBe(200);
    const events = await sseEvents(streamed);
    expect(events.at(-1)).toBe("[DONE]");
    expect(events[0]).toContain(`reached ${VPC_HOST} through the binding`);
    await expectIdle("vpc");
  });

  it("answers the official openai SDK", async () => {
    const client = new OpenAI({ apiKey: env.KVGATE_MASTER_KEY, baseURL: "https://kvgate.test/v1", fetch: (input, init) => exports.default.fetch(new Request(input as RequestInfo, init as RequestInit)) });
    const completion = await client.chat.completions.create({ model: "vpc", messages: ask, max_tokens: 4 });
    expect(completion.choices[0]?.message.content).toContain("through the binding");
  });

  it("without the service token is refused by the origin, and the client is told so without the origin's page", async () => {
    const res = await chat("vpc-no-token", ask);
    // No backend after it answered: a refusal that may be a firewall's for what the request holds is the request's (held-failure.ts).
    expect([res.status, res.headers.get("x-should-retry")]).toEqual([403, "false"]);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("upstream_auth_error");
    expect(body.error.message).toBe("backend gpu-private refused the request (HTTP 403): a proxy in front of its server refused what the request holds, or the gateway's access token");
    await expectIdle("vpc-no-token");
  });

  for (const [what, tag, ask] of [
    ["a request", "", (model: string, i: number) => new Request("https://kvgate.test/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json" }, body: JSON.stringify({ model, messages: [{ role: "user", content: `Hello ${i}` }], max_tokens: 4 }) })],
    ["a realtime handshake", "-rt", (model: string) => new Request(`https://kvgate.test/v1/realtime?model=${model}`, { headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" } })],
  ] as const) {
    it(`without the service token beside a server that serves: ${what} answered as its backend's own refusal (a 502 upstream_auth_error) says so on its request line`, async () => {
      const group = `vpc-own-refusal${tag}`;
      const deployments = [{ id: "gpu-private", baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC" }, { id: "serving", baseUrl: fleet[0] as string, model: UPSTREAM_MODEL }];
      await ok(admin("/admin/v1/groups", { method: "POST", json: { name: group, strategy: "round-robin", failover: { maxAttempts: 1 }, deployments } }), 201);
      vi.spyOn(console, "error").mockImplementation(() => undefined);
      const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
      const refused: [string | undefined, unknown][] = [];
      // Round-robin: one of two goes to the server without its token first.
      for (let i = 0; i < 2; i++) {
        log.mockClear();
        const ctx = createExecutionContext();
        const res = await worker.fetch(ask(group, i), env as unknown as Env, ctx);
        res.webSocket?.accept();
        res.webSocket?.close(1000);
        const text = await res.text();
        await waitOnExecutionContext(ctx);
        if (res.status !== 502) continue;
        const line = log.mock.calls.map((c) => String(c[0])).find((l) => l.startsWith('{"type":"request"'));
        refused.push([(JSON.parse(text) as { error: { code: string } }).error.code, (JSON.parse(line ?? "{}") as { error_code?: unknown }).error_code]);
      }
      expect(refused).toEqual([["upstream_auth_error", "upstream_auth_error"]]);
      await expectIdle(group);
    });
  }

  it("is probed through the binding with the headers: probes alone close its breaker", async () => {
    await openBreaker("vpc-probed");
    // The runtime's own fetch cannot resolve the private name: only the binding reaches /health.
    await vi.waitFor(async () => expect((await status("vpc-probed")).backends[0]?.breaker.state).toBe("closed"), EVENTUALLY);
  });

  it("is probed with its API key when its server wants one on the probe's path: probes alone close its breaker, and no log shows the key", async () => {
    const logged = (["log", "info", "warn", "error"] as const).map((m) => vi.spyOn(console, m));
    // Requests carry the key.
    const res = await chat("keyed-probed", ask);
    expect(res.status).toBe(200);
    await res.text();
    await openBreaker("keyed-probed");
    // Without the key every probe gets a 401, and each one opens the breaker again.
    await vi.waitFor(async () => expect((await status("keyed-probed")).backends[0]?.breaker.state).toBe("closed"), EVENTUALLY);
    const lines = logged.flatMap((spy) => spy.mock.calls.flat().map(String));
    expect(lines.some((l) => l.includes('"to":"closed"'))).toBe(true);
    expect(lines.join("\n")).not.toContain(env.GPU_API_KEY);
  });
});

describe("a realtime session with a deployment behind a VPC binding", () => {
  it("is opened through env[binding].fetch with the Access headers, and relays both ways", async () => {
    const res = await gateway("/v1/realtime?model=vpc-realtime", { headers: { upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" } });
    expect(res.status, res.status === 101 ? "" : await res.text()).toBe(101);
    expect(res.headers.get("x-kvgate-backend")).toBe("gpu-private");
    const ws = res.webSocket as WebSocket;
    const received: string[] = [];
    ws.addEventListener("message", (e) => received.push(String(e.data)));
    ws.accept();
    ws.send("over the tunnel");
    await vi.waitFor(() => expect(received).toEqual([`reached ${VPC_HOST} through the binding for ${UPSTREAM_MODEL}`, "over the tunnel"]), EVENTUALLY);
    ws.close(1000);
    await expectIdle("vpc-realtime");
    expect((await status("vpc-realtime")).backends[0]?.failed).toBe(0);
  });
});

describe("a server in the private network registering itself", () => {
  const access = { "CF-Access-Client-Id": "ACCESS_CLIENT_ID", "CF-Access-Client-Secret": "ACCESS_CLIENT_SECRET" };
  const register = (group: string, id: string) =>
    admin("/admin/v1/heartbeats", { method: "POST", json: { group, id, baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC", headersFromEnv: access } }, env.KVGATE_REGISTER_KEY);

  it("may not name a binding its group does not list: a register key cannot send another group's requests into a private network", async () => {
    const beat = await register("public-registered", "gpu-stray");
    expect(beat.status).toBe(403);
    expect(((await beat.json()) as { error: { code: string; param: string } }).error).toMatchObject({ code: "binding_not_allowed", param: "binding" });
    const res = await chat("public-registered", ask);
    expect(res.status).toBe(503);
    expect(await res.text()).not.toContain("through the binding");
  });

  it("is routed nothing once the operator takes its binding off the group's list, and its renewals are refused", async () => {
    expect((await register("vpc-registered-revoked", "gpu-revoked")).status).toBe(200);
    expect((await chat("vpc-registered-revoked", ask)).status).toBe(200);
    const patched = await admin("/admin/v1/groups/vpc-registered-revoked", { method: "PATCH", json: { registrationBindings: [] } });
    expect(patched.status, await patched.text()).toBe(200);
    const res = await chat("vpc-registered-revoked", ask);
    expect(res.status).toBe(503);
    expect(await res.text()).not.toContain("through the binding");
    // The admin API says why its state is active and it takes no request, in its row and the status's.
    const rows = await ok<{ data: DeploymentRow[] }>(admin("/admin/v1/groups/vpc-registered-revoked/deployments"));
    expect(rows.data.find((r) => r.id === "gpu-revoked")).toMatchObject({ state: "active", takesRequests: false, unrouted: "binding_not_allowed" });
    const fleet = (await ok<FleetStatus>(admin("/admin/v1/status"))).groups.find((g) => g.name === "vpc-registered-revoked");
    expect(fleet).toMatchObject({ takingRequests: 0, deploymentRows: [expect.objectContaining({ id: "gpu-revoked", takesRequests: false, unrouted: "binding_not_allowed" })] });
    expect((await register("vpc-registered-revoked", "gpu-revoked")).status).toBe(403);
  });

  it("stored through a binding its group does not list is shown by the admin API as taking no request, and why", async () => {
    // A server of a group that lists no binding, stored so (its list taken away while the registry was out, after the upgrade).
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "vpc-left-out", deployments: [] } }), 201);
    const registry = env.FLEET.getByName(REGISTRY_NAME);
    await runInDurableObject(registry, (_o, state) => {
      const sql = state.storage.sql;
      const g = storedGroup(sql, "vpc-left-out");
      const spec = { ...DeploymentSchema.parse({ baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC", headersFromEnv: access }), id: "gpu-left-out" };
      g.deployments.push({ spec, state: "active", source: "heartbeat", expiresAt: Date.now() + 600_000, removeAt: null, ttlMs: 30_000 });
      storeAsBefore(sql, g);
      sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('bindingRule', '1')");
    });
    await evictDurableObject(registry);
    expect((await chat("vpc-left-out", ask)).status).toBe(503);
    const rows = await ok<{ data: DeploymentRow[] }>(admin("/admin/v1/groups/vpc-left-out/deployments"));
    expect(rows.data.find((r) => r.id === "gpu-left-out")).toMatchObject({ state: "active", takesRequests: false, unrouted: "binding_not_allowed" });
    expect((await ok<FleetStatus>(admin("/admin/v1/status"))).groups.find((g) => g.name === "vpc-left-out")).toMatchObject({ takingRequests: 0 });
  });

  it("registered before groups listed bindings, keeps taking requests across the upgrade: the registry lists its binding in its group, config-made or API-made, and says so", async () => {
    const registry = env.FLEET.getByName(REGISTRY_NAME);
    await ok(admin("/admin/v1/groups", { method: "POST", json: { name: "vpc-upgraded-api", deployments: [] } }), 201);
    // As a registry of before the rule stored them: each group lists no binding, and holds a server that registered through GPU_VPC.
    await runInDurableObject(registry, (_o, state) => {
      const sql = state.storage.sql;
      for (const [group, id] of [["vpc-upgraded", "gpu-old-cfg"], ["vpc-upgraded-api", "gpu-old-api"]] as const) {
        const g = storedGroup(sql, group);
        const spec = { ...DeploymentSchema.parse({ baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC", headersFromEnv: access }), id };
        g.deployments.push({ spec, state: "active", source: "heartbeat", expiresAt: Date.now() + 600_000, removeAt: null, ttlMs: 30_000 });
        storeAsBefore(sql, g);
      }
      sql.exec("DELETE FROM meta WHERE k = 'bindingRule'");
      // The upgrade's deploy brings other modelGroups too: the config's seed is taken again.
      sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('seed', 'the last deploy')");
    });
    const logged = vi.spyOn(console, "log");
    await evictDurableObject(registry);

    const { groups } = await registry.snapshot();
    for (const [group, id] of [["vpc-upgraded", "gpu-old-cfg"], ["vpc-upgraded-api", "gpu-old-api"]] as const) {
      expect(groups.find((g) => g.name === group)?.deployments.map((d) => d.id)).toEqual([id]);
      await vi.waitFor(async () => {
        const res = await chat(group, ask);
        expect(res.status).toBe(200);
        expect(res.headers.get("x-kvgate-backend")).toBe(id);
        await res.text();
      }, EVENTUALLY);
      expect((await register(group, id)).status).toBe(200);
      // The rule holds from then on: the group lists GPU_VPC alone.
      const other = await admin("/admin/v1/heartbeats", { method: "POST", json: { group, id: "gpu-new", baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "OTHER_VPC" } }, env.KVGATE_REGISTER_KEY);
      expect(other.status).toBe(403);
      expect((await ok<{ registrationBindings?: string[] }>(admin(`/admin/v1/groups/${group}`))).registrationBindings).toEqual(["GPU_VPC"]);
    }
    const events = logged.mock.calls.flatMap((c) => (String(c[0]).startsWith("{") ? [JSON.parse(String(c[0])) as Record<string, unknown>] : []));
    const upgraded = (e: Record<string, unknown>) => e.group === "vpc-upgraded" || e.group === "vpc-upgraded-api";
    expect(events.filter((e) => e.event === "binding_not_allowed" && upgraded(e))).toEqual([]);
    expect(events.filter((e) => e.event === "registration_bindings_kept" && upgraded(e))).toEqual([
      expect.objectContaining({ level: "warn", group: "vpc-upgraded", bindings: ["GPU_VPC"], deployments: ["gpu-old-cfg"] }),
      expect.objectContaining({ level: "warn", group: "vpc-upgraded-api", bindings: ["GPU_VPC"], deployments: ["gpu-old-api"] }),
      // The deploy's config gives the config's group no list: its seed keeps the upgrade's, and says so.
      expect.objectContaining({ level: "warn", group: "vpc-upgraded", bindings: ["GPU_VPC"] }),
    ]);
    // The next start is no upgrade: the servers stay, and a list the operator took away stays away.
    // Taken away by unsetting it (RFC 7396 null): the group lists none, as before the upgrade.
    await ok(admin("/admin/v1/groups/vpc-upgraded-api", { method: "PATCH", json: { registrationBindings: null } }));
    logged.mockClear();
    await evictDurableObject(registry);
    expect((await registry.snapshot()).groups.find((g) => g.name === "vpc-upgraded")?.deployments.map((d) => d.id)).toEqual(["gpu-old-cfg"]);
    expect((await ok<{ registrationBindings?: string[] }>(admin("/admin/v1/groups/vpc-upgraded-api"))).registrationBindings).toBeUndefined();
    const again = logged.mock.calls.flatMap((c) => (String(c[0]).startsWith("{") ? [JSON.parse(String(c[0])) as Record<string, unknown>] : []));
    expect(again.filter((e) => e.event === "registration_bindings_kept")).toEqual([]);
    expect(again.filter((e) => e.event === "binding_not_allowed" && e.group === "vpc-upgraded-api")).toEqual([expect.objectContaining({ deployment: "gpu-old-api", binding: "GPU_VPC" })]);
  });

  it("may name the binding, and the Access secrets the config lists for heartbeats", async () => {
    const beat = { group: "vpc-registered", id: "gpu-self", baseUrl: `http://${VPC_HOST}`, model: UPSTREAM_MODEL, binding: "GPU_VPC", headersFromEnv: { "CF-Access-Client-Id": "ACCESS_CLIENT_ID", "CF-Access-Client-Secret": "ACCESS_CLIENT_SECRET" } };
    const registered = await admin("/admin/v1/heartbeats", { method: "POST", json: beat }, env.KVGATE_REGISTER_KEY);
    expect(registered.status, await registered.text()).toBe(200);
    const res = await chat("vpc-registered", ask);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-backend")).toBe("gpu-self");
    expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe(`reached ${VPC_HOST} through the binding`);
  });
});

/**
 * Opens the breaker of the group's one backend with two failed requests, through its routing
 * object; the group's openMs is 10 minutes, so only good probes can close it.
 */
async function openBreaker(group: string): Promise<void> {
  const g = groupConfig(group);
  const stub = env.MODEL_GROUP.getByName(g.name);
  for (let i = 0; i < 2; i++) {
    const d = await stub.route(i === 0 ? firstRouteCall(g, []) : routeCall(g, []));
    if ("refused" in d) throw new Error(`refused: ${d.refused}`);
    await stub.release([{ lease: d.lease, outcome: "upstream-error" }], []);
  }
  expect((await status(g.name)).backends[0]?.breaker.state).toBe("open");
}

/** The gateway Worker with another config and env, called the way the runtime calls it. */
async function gatewayWith(config: GatewayConfigInput, extraEnv: Record<string, unknown> = {}): Promise<Response> {
  const ctx = createExecutionContext();
  const req = new Request("https://kvgate.test/v1/models", { headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}` } });
  const res = await worker.fetch(req, { ...env, ...extraEnv, KVGATE_CONFIG: JSON.stringify(config) }, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

describe("a binding or a secret the config names but the Worker lacks", () => {
  it("is a config error at load: its answer says of what kind, the log names each one, never a secret's value", async () => {
    // The Worker logs the config error; kept out of the test output, and read below.
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const res = await gatewayWith({
      modelGroups: [
        {
          name: "unreachable",
          deployments: [
            {
              baseUrl: "http://10.1.2.3:8000",
              model: "m",
              binding: "NO_SUCH_VPC",
              headersFromEnv: { "CF-Access-Client-Id": "ACCESS_CLIENT_ID", "CF-Access-Client-Secret": "NOT_A_SECRET_HERE" },
            },
          ],
        },
      ],
    });
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("config_invalid");
    // Told to anyone of what kind they are; which, the operator's log says (a name may be a secret pasted where the name goes).
    expect(body.error.message).toBe("gateway misconfigured: config: modelGroups name a Workers VPC binding and a secret this Worker lacks or cannot send (the Worker's log says which: npx wrangler tail --env production; npm run check-config lists those the config reads)");
    const logged = errors.mock.calls.flat().map(String).join("\n");
    expect(logged).toContain('modelGroups[0].deployments[0].binding "NO_SUCH_VPC" is not a Workers VPC binding of this Worker');
    expect(logged).toContain("modelGroups[0].deployments[0].headersFromEnv.CF-Access-Client-Secret names NOT_A_SECRET_HERE, which is not set");
    // The header whose secret is set is no problem, and its value appears nowhere.
    expect(logged).not.toContain("CF-Access-Client-Id");
    for (const text of [body.error.message, logged]) expect(text).not.toContain(env.ACCESS_CLIENT_ID);
  });

  it("a header whose secret is another kind of binding is named as such, in the log", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const res = await gatewayWith({ modelGroups: [{ name: "odd", deployments: [{ baseUrl: "https://gpu.example", model: "m", headersFromEnv: { "X-Token": "MODEL_GROUP" } }] }] });
    expect(res.status).toBe(500);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("modelGroups name a secret this Worker lacks or cannot send");
    expect(errors.mock.calls.flat().map(String).join("\n")).toContain("headersFromEnv.X-Token names MODEL_GROUP, which is a binding, not a secret");
  });
});

describe("a group's location hint", () => {
  it("is passed when the group's Durable Object stub is made, and the runtime takes it", async () => {
    const getByName = vi.spyOn(env.MODEL_GROUP, "getByName");
    const res = await chat("placed", ask);
    expect(res.status).toBe(200);
    await res.text();
    expect(getByName).toHaveBeenCalledWith("placed", { locationHint: "weur" });
    // A group without one gets a stub without options: nothing added to its route call.
    const plain = await chat("vpc", ask);
    expect(plain.status).toBe(200);
    await plain.text();
    expect(getByName).toHaveBeenCalledWith("vpc");
    await expectIdle("placed");
    await expectIdle("vpc");
  });

  /**
   * Every stub made of the routing objects in `names`, by the Worker and by the registry alike:
   * only the first creates the object, and only its hint places it; which call comes first is
   * not the test's to assume.
   */
  async function stubsOf(names: readonly string[]): Promise<() => unknown[][]> {
    const namespaces = new Set([env.MODEL_GROUP]);
    await runInDurableObject(env.FLEET.getByName(REGISTRY_NAME), (registry) => void namespaces.add((registry as unknown as { env: Env }).env.MODEL_GROUP));
    const spies = [...namespaces].map((ns) => vi.spyOn(ns, "getByName"));
    return () => spies.flatMap((s) => s.mock.calls).filter(([name]) => names.includes(name));
  }

  /** No request of `group` in flight, as GET /admin/v1/groups/:name/deployments shows it: every release reached its object. */
  async function idle(group: string): Promise<void> {
    const inFlight = async () => (await ok<{ data: { inFlight: number | null }[] }>(admin(`/admin/v1/groups/${group}/deployments`))).data.map((d) => d.inFlight);
    await vi.waitFor(async () => expect(new Set(await inFlight())).toEqual(new Set([0])), EVENTUALLY);
  }

  it("of a group made through the admin API, sharded or not: on every stub of its objects, the registry's push that creates them first", async () => {
    const groups = [
      { name: "placed-later", shards: 1 },
      { name: "placed-sharded", shards: 2 },
    ];
    const stubs = await stubsOf(groups.flatMap((g) => objectNamesOf(g.name, 2)));
    const deployments = [0, 1].map((i) => ({ id: `sim-${i}`, baseUrl: fleet[i], model: UPSTREAM_MODEL }));
    for (const { name, shards } of groups) {
      await ok(admin("/admin/v1/groups", { method: "POST", json: { name, shards, locationHint: "apac", deployments } }), 201);
      for (let i = 0; i < 6; i++) {
        const res = await chat(name, [{ role: "user", content: `Where are you, ${i}?` }]);
        expect(res.status).toBe(200);
        await res.text();
      }
      // The last release goes by the idle isolate's flush: no route call came to carry it.
      await idle(name);
    }
    // One shard again: the registry retires the second shard's object, and its alarm hands that object's counts to the first.
    await ok(admin("/admin/v1/groups/placed-sharded", { method: "PATCH", json: { shards: 1 } }));
    await vi.waitFor(
      async () => {
        await runInDurableObject(env.FLEET.getByName(REGISTRY_NAME), (registry: FleetRegistry) => registry.alarm());
        expect((await env.FLEET.getByName(REGISTRY_NAME).snapshot()).objects?.["placed-sharded"]).toBeUndefined();
      },
      { timeout: 10_000, interval: 500 },
    );

    const made = stubs();
    for (const object of [...objectNamesOf("placed-later", 1), ...objectNamesOf("placed-sharded", 2)]) expect(made.map(([name]) => name)).toContain(object);
    expect(made.filter(([, options]) => (options as { locationHint?: string } | undefined)?.locationHint !== "apac")).toEqual([]);
  });

  it("of a config group: on the stubs of the registry's push at the deploy that adds it, which creates its objects", async () => {
    const names = objectNamesOf("placed-seeded", 2);
    const stubs = await stubsOf(names);
    const config = JSON.parse(env.KVGATE_CONFIG) as { modelGroups: unknown[] };
    const deployments = [0, 1].map((i) => ({ id: `sim-${i}`, baseUrl: fleet[i], model: UPSTREAM_MODEL }));
    config.modelGroups.push({ name: "placed-seeded", shards: 2, locationHint: "oc", deployments });
    // The deploy: the registry started on its storage with the new config, before any Worker routes to the group.
    await runInDurableObject(env.FLEET.getByName(REGISTRY_NAME), (_o, state) => void new FleetRegistry(state, { ...env, KVGATE_CONFIG: JSON.stringify(config) }));
    expect(stubs()).toEqual(names.map((name) => [name, { locationHint: "oc" }]));
    // The registry as that deploy left it; the pool's config seeds it back at its next start.
    await evictDurableObject(env.FLEET.getByName(REGISTRY_NAME));
  });
});
