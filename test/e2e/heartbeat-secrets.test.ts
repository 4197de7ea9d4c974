import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { adminCall, adminFetch, issuedKey } from "./admin-gateway.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What a heartbeat may make the gateway send: the register key is on every GPU server, so a
 * heartbeat is as trusted as the least trusted of them. The gateway sends a deployment the
 * secrets it names (apiKeyEnv as its bearer, headersFromEnv as headers), so a heartbeat that
 * named the gateway's own keys, or any other Worker secret, would have them sent to an address of
 * its choosing. Through the bundled gateway on a real socket, to a simulated server that keeps the
 * headers of every request it receives.
 */

const MODEL = "kvgate-sim";
const secret = (prefix: string) => `${prefix}-${randomBytes(16).toString("hex")}`;
const KEYS = { KVGATE_ADMIN_KEY: secret("sk-admin"), KVGATE_REGISTER_KEY: secret("sk-register"), KVGATE_METRICS_KEY: secret("sk-metrics") };

let attacker: Fleet;

beforeAll(async () => {
  attacker = await startFleet({ workers: 1, basePort: 0, preset: "instant", servedModelName: MODEL });
});
afterAll(async () => {
  await attacker?.close();
});

/** Every header value the server was sent, over all its requests. */
const headerValues = (fleet: Fleet) => fleet.requests(0).flatMap((r) => Object.values(r.headers).flat().filter((v): v is string => typeof v === "string"));

const heartbeat = (gw: TestGateway, beat: Record<string, unknown>, key = KEYS.KVGATE_REGISTER_KEY) => adminCall(gw.url, key, "POST", "/heartbeats", beat);

async function chat(gw: TestGateway, group: string): Promise<Response> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: group, max_tokens: 2, messages: [{ role: "user", content: "hello" }] }),
  });
  await res.arrayBuffer();
  return res;
}

describe("a heartbeat with the register key", () => {
  let gw: TestGateway;
  const OTHER = secret("worker-secret");

  beforeAll(async () => {
    gw = await startTestGateway({ modelGroups: [{ name: "open", deployments: [] }, { name: "listing", registrationBindings: ["UPSTREAM_TOKEN", "NO_SUCH_NAME_AT_ALL"], deployments: [] }] }, { ...KEYS, UPSTREAM_TOKEN: OTHER });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it("may not name the gateway's own keys: refused, and no request carries them to the address it gave", async () => {
    const evil = { group: "open", id: "evil", baseUrl: attacker.urls[0], model: MODEL, apiKeyEnv: "KVGATE_ADMIN_KEY", headersFromEnv: { "x-a": "KVGATE_MASTER_KEY" } };
    const beat = await heartbeat(gw, evil);
    await chat(gw, "open");
    const sent = headerValues(attacker);
    for (const [name, value] of Object.entries({ ...KEYS, KVGATE_MASTER_KEY: gw.key })) expect(sent.some((v) => v.includes(value)), `${name} reached the heartbeat's address`).toBe(false);
    expect(beat).toMatchObject({ status: 400, error: { type: "invalid_request_error", code: "gateway_key_named", param: "apiKeyEnv" } });
    expect(beat.error?.message).toMatch(/KVGATE_ADMIN_KEY/);
    expect(JSON.stringify(beat)).not.toContain(KEYS.KVGATE_ADMIN_KEY);

    const header = await heartbeat(gw, { ...evil, apiKeyEnv: undefined, headersFromEnv: { "x-b": "KVGATE_METRICS_KEY" } });
    expect(header).toMatchObject({ status: 400, error: { code: "gateway_key_named", param: "headersFromEnv.x-b" } });
    // Not with the admin key either: no deployment may be sent the gateway's keys.
    expect(await heartbeat(gw, evil, KEYS.KVGATE_ADMIN_KEY)).toMatchObject({ status: 400, error: { param: "apiKeyEnv" } });
    expect(attacker.requests(0)).toEqual([]);
  });

  it("may not name another Worker secret the config does not list for heartbeats", async () => {
    const beat = await heartbeat(gw, { group: "open", id: "curious", baseUrl: attacker.urls[0], model: MODEL, apiKeyEnv: "UPSTREAM_TOKEN" });
    await chat(gw, "open");
    expect(headerValues(attacker).some((v) => v.includes(OTHER)), "UPSTREAM_TOKEN reached the heartbeat's address").toBe(false);
    expect(beat).toMatchObject({ status: 403, error: { type: "permission_error", code: "secret_not_allowed", param: "apiKeyEnv" } });
    expect(beat.error?.message).toMatch(/auth\.registrationSecrets/);
  });

  it("learns nothing of which secrets exist from a binding it names: a secret's name and a name nothing has are refused alike", async () => {
    const refusal = async (group: string, binding: string) => {
      const beat = await heartbeat(gw, { group, id: "probe", baseUrl: "http://10.0.0.9:8000", model: MODEL, binding });
      return [beat.status, beat.error?.message.replaceAll(binding, "NAME")];
    };
    // Named where the group lists it (an operator's slip): not a binding, whatever the name holds.
    expect(await refusal("listing", "UPSTREAM_TOKEN")).toEqual(await refusal("listing", "NO_SUCH_NAME_AT_ALL"));
    expect((await refusal("listing", "UPSTREAM_TOKEN"))[0]).toBe(400);
    // Where it does not: refused for that before anything is looked up.
    for (const name of ["UPSTREAM_TOKEN", "KVGATE_ADMIN_KEY"]) expect(await refusal("open", name)).toEqual(await refusal("open", "NO_SUCH_NAME_AT_ALL"));
    expect((await refusal("open", "UPSTREAM_TOKEN"))[0]).toBe(403);
  });
});

describe("a config's auth.registrationSecrets", () => {
  let gw: TestGateway;
  let gpu: Fleet;
  const TOKEN = secret("gpu-token");
  const OTHER = secret("worker-secret");

  beforeAll(async () => {
    gpu = await startFleet({ workers: 1, basePort: 0, preset: "instant", servedModelName: MODEL });
    gw = await startTestGateway({ auth: { registrationSecrets: ["GPU_TOKEN"] }, modelGroups: [{ name: "listed", deployments: [] }] }, { ...KEYS, GPU_TOKEN: TOKEN, UPSTREAM_TOKEN: OTHER, EMPTY_TOKEN: "" });
  });
  afterAll(async () => {
    await gw?.close();
    await gpu?.close();
  });

  it("lets a heartbeat name the secrets it lists, and sends them; another is still refused", async () => {
    const beat = { group: "listed", id: "gpu-0", baseUrl: gpu.urls[0], model: MODEL, apiKeyEnv: "GPU_TOKEN" };
    expect((await heartbeat(gw, beat)).status).toBe(200);
    expect((await chat(gw, "listed")).status).toBe(200);
    expect(gpu.requests(0).map((r) => r.headers.authorization)).toEqual([`Bearer ${TOKEN}`]);

    const refused = await heartbeat(gw, { ...beat, headersFromEnv: { "x-b": "UPSTREAM_TOKEN" } });
    expect(refused).toMatchObject({ status: 403, error: { code: "secret_not_allowed", param: "headersFromEnv.x-b" } });
    expect(await heartbeat(gw, { ...beat, apiKeyEnv: "KVGATE_REGISTER_KEY" })).toMatchObject({ status: 400, error: { code: "gateway_key_named" } });
    // The deployment as it registered, unchanged by either.
    expect((await chat(gw, "listed")).status).toBe(200);
    expect(gpu.requests(0).map((r) => [r.headers.authorization, r.headers["x-b"]])).toEqual([
      [`Bearer ${TOKEN}`, undefined],
      [`Bearer ${TOKEN}`, undefined],
    ]);
  });

  it("learns nothing of which names the Worker has from an unlisted name: a secret, an empty one, a binding and a name nothing has are refused alike", async () => {
    const refusal = async (field: "apiKeyEnv" | "headersFromEnv", name: string) => {
      const named = field === "apiKeyEnv" ? { apiKeyEnv: name } : { apiKeyEnv: "GPU_TOKEN", headersFromEnv: { "x-b": name } };
      const beat = await heartbeat(gw, { group: "listed", id: "probe", baseUrl: gpu.urls[0], model: MODEL, ...named });
      return { status: beat.status, code: beat.error?.code, param: beat.error?.param, message: beat.error?.message.replaceAll(name, "NAME") };
    };
    for (const field of ["apiKeyEnv", "headersFromEnv"] as const) {
      const secret = await refusal(field, "UPSTREAM_TOKEN");
      expect(secret).toMatchObject({ status: 403, code: "secret_not_allowed" });
      // Nothing by that name, a Durable Object binding, an empty secret: each as the secret is.
      for (const name of ["NO_SUCH_NAME_AT_ALL", "TENANTS", "EMPTY_TOKEN"]) expect(await refusal(field, name), `${field} ${name}`).toEqual(secret);
    }
  });
});

describe("a deployment on a public host over plain http", () => {
  let gw: TestGateway;
  const TOKEN = secret("gpu-token");

  beforeAll(async () => {
    gw = await startTestGateway({ auth: { registrationSecrets: ["GPU_TOKEN"] }, modelGroups: [{ name: "public", deployments: [] }] }, { ...KEYS, GPU_TOKEN: TOKEN });
  });
  afterAll(async () => {
    await gw?.close();
  });

  const admin = (method: string, path: string, body?: unknown) => adminCall(gw.url, KEYS.KVGATE_ADMIN_KEY, method, path, body);

  // No request reaches these hosts: the refusal comes before any, and this machine has no internet.
  const PUBLIC = "http://gpu.example.com:8000";
  const cleartext = { status: 400, error: { type: "invalid_request_error", code: "cleartext_secret", param: "baseUrl" } };

  it("may not name a secret, from a heartbeat or the admin API: it would cross the internet in cleartext", async () => {
    const beat = await heartbeat(gw, { group: "public", id: "far", baseUrl: PUBLIC, model: MODEL, apiKeyEnv: "GPU_TOKEN" });
    expect(beat).toMatchObject(cleartext);
    expect(beat.error?.message).toMatch(/plain http.*apiKeyEnv.*cleartext/);
    expect(JSON.stringify(beat)).not.toContain(TOKEN);
    expect(await admin("POST", "/groups/public/deployments", { id: "far", baseUrl: PUBLIC, model: MODEL, headersFromEnv: { "cf-access-client-secret": "GPU_TOKEN" } })).toMatchObject(cleartext);
  });

  it("may not become one by a patch of either field", async () => {
    expect((await admin("POST", "/groups/public/deployments", { id: "tls", baseUrl: "https://gpu.example.com", model: MODEL, apiKeyEnv: "GPU_TOKEN" })).status).toBe(201);
    expect(await admin("PATCH", "/groups/public/deployments/tls", { baseUrl: PUBLIC })).toMatchObject(cleartext);
    expect((await admin("POST", "/groups/public/deployments", { id: "open", baseUrl: PUBLIC, model: MODEL })).status).toBe(201);
    expect(await admin("PATCH", "/groups/public/deployments/open", { apiKeyEnv: "GPU_TOKEN" })).toMatchObject(cleartext);
  });

  it("may not come in a new group or the whole fleet's PUT; what the fleet held already stays", async () => {
    const far = { id: "far", baseUrl: PUBLIC, model: MODEL, apiKeyEnv: "GPU_TOKEN" };
    const group = await admin("POST", "/groups", { name: "other", deployments: [{ id: "near", baseUrl: "http://10.0.0.9:8000", model: MODEL }, far] });
    expect(group).toMatchObject({ ...cleartext, error: { ...cleartext.error, param: "deployments[1].baseUrl" } });
    const fleet = (await (await fetch(`${gw.url}/admin/v1/fleet`, { headers: { authorization: `Bearer ${KEYS.KVGATE_ADMIN_KEY}` } })).json()) as { modelGroups: { deployments: unknown[] }[] };
    const put = await admin("PUT", "/fleet", { modelGroups: fleet.modelGroups.map((g) => ({ ...g, deployments: [...g.deployments, far] })) });
    expect(put).toMatchObject({ ...cleartext, error: { ...cleartext.error, param: `modelGroups[0].deployments[${fleet.modelGroups[0]?.deployments.length}].baseUrl` } });
    expect((await admin("PUT", "/fleet", fleet)).status).toBe(200);
  });

  it("is taken without a secret, and with one on a host only a private network reaches", async () => {
    expect((await heartbeat(gw, { group: "public", id: "lan", baseUrl: "http://gpu-7:8000", model: MODEL, apiKeyEnv: "GPU_TOKEN" })).status).toBe(200);
    expect((await heartbeat(gw, { group: "public", id: "near", baseUrl: "http://10.0.0.7:8000", model: MODEL, apiKeyEnv: "GPU_TOKEN" })).status).toBe(200);
    expect((await heartbeat(gw, { group: "public", id: "keyless", baseUrl: "http://gpu-8.example.com:8000", model: MODEL })).status).toBe(200);
  });
});

describe("an admin key whose value the register key or the metrics key shares", () => {
  // Each GPU server holds the register key, a Prometheus box the metrics key: with the admin key's
  // value, either would administer the fleet and every virtual key.
  for (const [name, what] of [["KVGATE_REGISTER_KEY", "register key"], ["KVGATE_METRICS_KEY", "metrics key"]] as const) {
    it(`opens no admin route while the ${what} is the admin key: a key that holder has administers nothing`, async () => {
      const shared = secret("sk-shared");
      const gw = await startTestGateway({ modelGroups: [{ name: "shared", deployments: [] }] }, { ...KEYS, KVGATE_ADMIN_KEY: shared, [name]: shared });
      try {
        const minted = await adminCall(gw.url, shared, "POST", "/keys", { name: "minted-by-a-gpu-server" });
        expect(minted).toMatchObject({ status: 401, error: { type: "authentication_error" } });
        expect(minted.error?.message).toBe(`the admin key (KVGATE_ADMIN_KEY) must differ from the ${what} (${name}); the admin API is off until it does`);
        expect(JSON.stringify(minted)).not.toContain(shared);
        expect((await adminCall(gw.url, shared, "GET", "/groups")).status).toBe(401);
        // The key still opens its own door.
        if (name === "KVGATE_REGISTER_KEY") expect((await heartbeat(gw, { group: "shared", id: "gpu-0", baseUrl: attacker.urls[0], model: MODEL }, shared)).status).toBe(200);
        else {
          expect((await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${shared}` } })).status).toBe(200);
          // Nor does it open the one admin route a heartbeat is: the scraper would register a server and be sent clients' prompts.
          const sentBefore = attacker.requests(0).length;
          expect(await heartbeat(gw, { group: "shared", id: "scraper", baseUrl: attacker.urls[0], model: MODEL }, shared)).toMatchObject({ status: 401, error: { type: "authentication_error" } });
          await chat(gw, "shared");
          expect(attacker.requests(0).length).toBe(sentBefore);
          // The register key, a secret of its own, registers servers as ever.
          expect((await heartbeat(gw, { group: "shared", id: "gpu-0", baseUrl: attacker.urls[0], model: MODEL })).status).toBe(200);
        }
      } finally {
        await gw.close();
      }
    }, 60_000);
  }
});

describe("a register key whose value the metrics key shares", () => {
  it("takes no heartbeat: a Prometheus scraper's key would register a server and be sent clients' prompts", async () => {
    const shared = secret("sk-shared");
    const gw = await startTestGateway({ modelGroups: [{ name: "scraped", deployments: [] }] }, { ...KEYS, KVGATE_REGISTER_KEY: shared, KVGATE_METRICS_KEY: shared });
    try {
      const beat = { group: "scraped", id: "gpu-0", baseUrl: attacker.urls[0], model: MODEL };
      for (const key of [shared, KEYS.KVGATE_ADMIN_KEY]) {
        const r = await heartbeat(gw, beat, key);
        expect(r).toMatchObject({ status: 401, error: { type: "authentication_error" } });
        expect(r.error?.message).toBe("the register key (KVGATE_REGISTER_KEY) must differ from the metrics key (KVGATE_METRICS_KEY); heartbeats are off until it does");
        expect(JSON.stringify(r)).not.toContain(shared);
      }
      const list = await adminFetch(gw.url, KEYS.KVGATE_ADMIN_KEY, "GET", "/groups/scraped/deployments");
      expect({ status: list.status, data: ((await list.json()) as { data: unknown[] }).data }).toEqual({ status: 200, data: [] });
      // The key still opens its own door.
      expect((await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${shared}` } })).status).toBe(200);
    } finally {
      await gw.close();
    }
  }, 60_000);
});

describe("a group closed to registration (registration: false)", () => {
  // One tenant's group, served only by the servers the operator added (config or admin API): the
  // register key, on every GPU server, must not add one to it and be sent that tenant's prompts.
  let gw: TestGateway;
  let gpu: Fleet;
  let tenant: string;
  const admin = (method: string, path: string, body?: unknown) => adminCall(gw.url, KEYS.KVGATE_ADMIN_KEY, method, path, body);
  const evil = { group: "confidential", id: "evil", baseUrl: "", model: MODEL, weight: 1000, maxInFlight: 100000, ttlSeconds: 3600 };
  const tenantChat = async () => {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${tenant}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "confidential", max_tokens: 2, messages: [{ role: "user", content: "the tenant's secret plans" }] }),
    });
    await res.arrayBuffer();
    return res.status;
  };

  beforeAll(async () => {
    gpu = await startFleet({ workers: 1, basePort: 0, preset: "instant", servedModelName: MODEL });
    evil.baseUrl = attacker.urls[0] as string;
    // Made open, as a fleet of before this setting is, and closed by the operator's PATCH.
    gw = await startTestGateway({ modelGroups: [{ name: "confidential", deployments: [{ id: "gpu-0", baseUrl: gpu.urls[0] as string, model: MODEL }] }, { name: "open", deployments: [] }] }, KEYS);
    tenant = (await issuedKey(gw.url, KEYS.KVGATE_ADMIN_KEY, { models: ["confidential"] })).key;
  });
  afterAll(async () => {
    await gw?.close();
    await gpu?.close();
  });

  it("refuses a heartbeat into it, with the register key or the admin key: the tenant's prompts reach only the operator's servers", async () => {
    const closed = await admin("PATCH", "/groups/confidential", { registration: false });
    const sentBefore = attacker.requests(0).length;
    const beat = await heartbeat(gw, evil);
    expect(beat.status, "the heartbeat into the closed group").toBe(403);
    expect(beat).toMatchObject({ error: { type: "permission_error", code: "registration_not_allowed", param: "group" } });
    expect(beat.error?.message).toMatch(/registration/);
    expect(closed.status).toBe(200);
    expect(await heartbeat(gw, evil, KEYS.KVGATE_ADMIN_KEY)).toMatchObject({ status: 403, error: { code: "registration_not_allowed", param: "group" } });
    for (let i = 0; i < 5; i++) expect(await tenantChat()).toBe(200);
    expect(attacker.requests(0).length, "requests the heartbeat's address was sent").toBe(sentBefore);
    expect(gpu.requests(0).length).toBe(5);
    // The group reads say so; another group still takes servers that register themselves.
    const read = (await (await adminFetch(gw.url, KEYS.KVGATE_ADMIN_KEY, "GET", "/groups/confidential")).json()) as { registration?: boolean };
    expect(read.registration).toBe(false);
    expect((await heartbeat(gw, { ...evil, group: "open", id: "gpu-1" })).status).toBe(200);
  });

  it("routes nothing to a server that registered while it was open, and refuses its renewals", async () => {
    expect((await admin("PATCH", "/groups/confidential", { registration: true })).status).toBe(200);
    expect((await heartbeat(gw, evil)).status).toBe(200);
    expect((await admin("PATCH", "/groups/confidential", { registration: false })).status).toBe(200);
    const sentBefore = attacker.requests(0).length;
    for (let i = 0; i < 5; i++) expect(await tenantChat()).toBe(200);
    expect(attacker.requests(0).length, "requests the registered server was sent once the group closed").toBe(sentBefore);
    expect(await heartbeat(gw, evil)).toMatchObject({ status: 403, error: { code: "registration_not_allowed" } });
    const rows = (await (await adminFetch(gw.url, KEYS.KVGATE_ADMIN_KEY, "GET", "/groups/confidential/deployments")).json()) as { data: { id: string; takesRequests: boolean; unrouted: string | null }[] };
    expect(rows.data.find((d) => d.id === "evil")).toMatchObject({ takesRequests: false, unrouted: "registration_not_allowed" });
    expect(rows.data.find((d) => d.id === "gpu-0")).toMatchObject({ takesRequests: true, unrouted: null });
  });
});

describe("a config's group with registration: false", () => {
  it("is closed to heartbeats from the first start", async () => {
    const gw = await startTestGateway({ modelGroups: [{ name: "confidential", registration: false, deployments: [{ id: "gpu-0", baseUrl: "http://10.0.0.9:8000", model: MODEL }] }] }, KEYS);
    try {
      expect(await heartbeat(gw, { group: "confidential", id: "evil", baseUrl: attacker.urls[0], model: MODEL, weight: 1000 })).toMatchObject({ status: 403, error: { type: "permission_error", code: "registration_not_allowed", param: "group" } });
    } finally {
      await gw.close();
    }
  }, 60_000);
});
