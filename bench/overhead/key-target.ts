/**
 * kvgate-key: kvgate's gateway with an admin key, and a virtual key made through the admin API
 * that the client sends instead of the master key. Its limits are set far above what the load
 * can reach, so none refuses, but every one is checked; usage tracking is on, so every answer's
 * usage is read (a stream's by the JavaScript relay) and carried to the tenants object.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

/** What POST /admin/v1/keys is given. */
export interface KeySettings {
  name: string;
  rpm: number;
  max_parallel: number;
  tpm?: number;
  budget_tokens?: number;
  budget_period?: "day" | "month" | "total";
  track_usage: boolean;
}

/** Limits no benchmark window reaches (1e8 requests a minute, 1e15 tokens a month), all set. */
export const BENCH_KEY: KeySettings = {
  name: "bench-overhead",
  rpm: 100_000_000,
  tpm: 10_000_000_000,
  max_parallel: 100_000,
  budget_tokens: 1e15,
  budget_period: "month",
  track_usage: true,
};

/**
 * The key check and the request limits only: nothing that needs the upstream's usage, so the
 * answer keeps the native pipe. bench:ceiling's kvgate-key-nousage, to split a key's cost into
 * the check and limits, and the usage accounting.
 */
export const BENCH_KEY_NO_USAGE: KeySettings = { name: "bench-no-usage", rpm: 100_000_000, max_parallel: 100_000, track_usage: false };

/** The routing object sends usage to the tenants object a second after it arrives; this allows for a loaded machine. */
const USAGE_WAIT_MS = 15_000;
const USAGE_POLL_MS = 250;

export interface VirtualKey {
  id: string;
  key: string;
}

/** A fresh admin key for one run (192 random bits), never stored. */
export function newAdminKey(): string {
  return `sk-kvgate-admin-bench-${randomBytes(24).toString("hex")}`;
}

function adminHeaders(adminKey: string): Record<string, string> {
  return { authorization: `Bearer ${adminKey}`, "content-type": "application/json" };
}

export async function createVirtualKey(url: string, adminKey: string, settings: KeySettings): Promise<VirtualKey> {
  const res = await fetch(`${url}/admin/v1/keys`, { method: "POST", headers: adminHeaders(adminKey), body: JSON.stringify(settings) });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`creating the benchmark's virtual key answered ${res.status}: ${text.slice(0, 300)}`);
  const view = JSON.parse(text) as { id?: unknown; key?: unknown };
  if (typeof view.id !== "string" || typeof view.key !== "string") throw new Error("creating the benchmark's virtual key answered no id or key");
  return { id: view.id, key: view.key };
}

/** Requests the admin API has recorded for the key so far. */
async function usageRequests(url: string, adminKey: string, id: string): Promise<number> {
  const res = await fetch(`${url}/admin/v1/usage?key=${encodeURIComponent(id)}`, { headers: adminHeaders(adminKey) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET /admin/v1/usage?key=${id} answered ${res.status}: ${text.slice(0, 300)}`);
  const requests = (JSON.parse(text) as { requests?: unknown }).requests;
  if (typeof requests !== "number") throw new Error(`GET /admin/v1/usage?key=${id} has no requests count`);
  return requests;
}

/**
 * Waits until the key's usage shows requests (it arrives in batches) and returns how many; throws
 * when none arrive, because then the target did not measure the key path at all.
 */
export async function confirmKeyUsage(url: string, adminKey: string, id: string): Promise<number> {
  const until = Date.now() + USAGE_WAIT_MS;
  for (;;) {
    const requests = await usageRequests(url, adminKey, id);
    if (requests > 0) return requests;
    if (Date.now() >= until) throw new Error(`kvgate-key: after the warm-up, GET /admin/v1/usage?key=${id} still shows 0 requests: the virtual key's path was not exercised`);
    await sleep(USAGE_POLL_MS);
  }
}
