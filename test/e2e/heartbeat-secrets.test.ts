import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
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

async function heartbeat(gw: TestGateway, beat: Record<string, unknown>, key = KEYS.KVGATE_REGISTER_KEY): Promise<{ status: number; error?: { message: string; type: string; code: string; param: string | null } }> {
  const res = await fetch(`${gw.url}/admin/v1/heartbeats`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(beat) });
  const body = (await res.json()) as { error?: { message: string; type: string; code: string; param: string | null } };
  return { status: res.status, ...(body.error ? { error: body.error } : {}) };
}

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
    gw = await startTestGateway({ modelGroups: [{ name: "open", deployments: [] }] }, { ...KEYS, UPSTREAM_TOKEN: OTHER });
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
});

describe("a config's auth.registrationSecrets", () => {
  let gw: TestGateway;
  let gpu: Fleet;
  const TOKEN = secret("gpu-token");
  const OTHER = secret("worker-secret");

  beforeAll(async () => {
    gpu = await startFleet({ workers: 1, basePort: 0, preset: "instant", servedModelName: MODEL });
    gw = await startTestGateway({ auth: { registrationSecrets: ["GPU_TOKEN"] }, modelGroups: [{ name: "listed", deployments: [] }] }, { ...KEYS, GPU_TOKEN: TOKEN, UPSTREAM_TOKEN: OTHER });
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
});
