import { randomBytes } from "node:crypto";
import { afterAll, beforeAll } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/** Fresh admin and register keys for a file's gateway. */
export function adminKeys(): { KVGATE_ADMIN_KEY: string; KVGATE_REGISTER_KEY: string } {
  return { KVGATE_ADMIN_KEY: `sk-admin-${randomBytes(16).toString("hex")}`, KVGATE_REGISTER_KEY: `sk-register-${randomBytes(16).toString("hex")}` };
}

/** What an admin call was answered: its status, and its OpenAI-style error when it was refused. */
export interface AdminAnswer {
  status: number;
  error?: { message: string; type: string; code: string; param: string | null };
}

/** `method path` under /admin/v1 of the gateway at `url`, with `key`; `body` as JSON. */
export async function adminCall(url: string, key: string, method: string, path: string, body?: unknown): Promise<AdminAnswer> {
  const res = await fetch(`${url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const answer = (await res.json()) as { error?: AdminAnswer["error"] };
  return { status: res.status, ...(answer.error ? { error: answer.error } : {}) };
}

/** `method path` under /admin/v1 of the gateway at `url`, with `key`; `body` as JSON: the answer as it came. */
export function adminFetch(url: string, key: string, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
}

/** A virtual key made through the admin API of the gateway at `url` (`adminKey`), with `fields`: its id and the key. */
export async function issuedKey(url: string, adminKey: string, fields: Record<string, unknown> = {}): Promise<{ id: string; key: string }> {
  const res = await adminFetch(url, adminKey, "POST", "/keys", fields);
  if (res.status !== 201) throw new Error(`POST /admin/v1/keys: ${res.status} ${await res.text()}`);
  return (await res.json()) as { id: string; key: string };
}

export interface AdminGateway {
  keys: ReturnType<typeof adminKeys>;
  /** The rest are set once the file's tests run. */
  gw: TestGateway;
  upstream: HostileUpstream;
  /** The hostile upstream's well-behaved server, gpu-0's baseUrl. */
  ok: string;
}

/**
 * For a file's tests: the bundled gateway on a real socket, with fresh admin and register keys and
 * one group, `group`, of one deployment, gpu-0, on a hostile upstream's `/ok`; started before the
 * tests, closed after.
 */
export function useAdminGateway(group: string): AdminGateway {
  const at = { keys: adminKeys() } as AdminGateway;
  beforeAll(async () => {
    at.upstream = await startHostileUpstream();
    at.ok = `${at.upstream.url}/ok`;
    at.gw = await startTestGateway({ modelGroups: [{ name: group, deployments: [{ id: "gpu-0", baseUrl: at.ok, model: "m" }] }] }, at.keys);
  });
  afterAll(async () => {
    await at.gw?.close();
    await at.upstream?.close();
  });
  return at;
}
