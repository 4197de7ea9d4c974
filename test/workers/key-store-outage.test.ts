import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";

/**
 * The admin API's key routes while the tenants object cannot take a call: overloaded, or reset by
 * a deploy. The runtime cannot be made to fail a Durable Object call on purpose, so the binding is
 * a stand-in whose calls throw as the runtime's do (as in before-the-app.test.ts).
 */

const METHODS = ["create", "list", "get", "update", "revoke", "rotate", "usage"] as const;

/** A tenants binding whose every call fails with `error`. */
function failingTenants(error: () => Error): unknown {
  const fail = async () => Promise.reject(error());
  return { getByName: () => Object.fromEntries(METHODS.map((m) => [m, fail])) };
}

interface Answer {
  status: number;
  retryAfter: string | null;
  error: { type: string; code: string; param: string | null; message: string };
}

async function adminCall(tenants: unknown, method: string, path: string, body?: unknown): Promise<Answer> {
  const ctx = createExecutionContext();
  const headers = { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}`, "content-type": "application/json" };
  const res = await worker.fetch(new Request(`https://kvgate.test/admin/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }), { ...env, TENANTS: tenants } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  return { status: res.status, retryAfter: res.headers.get("retry-after"), error: ((await res.json()) as Answer["error"] & { error: Answer["error"] }).error };
}

const READS: [string, string][] = [
  ["GET", "/keys"],
  ["GET", "/keys/key_x"],
  ["GET", "/usage?key=key_x"],
];
const CHANGES: [string, string, unknown?][] = [
  ["POST", "/keys", { rpm: 5 }],
  ["PATCH", "/keys/key_x", { rpm: 5 }],
  ["POST", "/keys/key_x/revoke"],
  ["POST", "/keys/key_x/rotate"],
];

describe("the key routes while the tenants object cannot be reached", () => {
  it("answer 503 with Retry-After, not a 500; a change's answer says it may have been made", async () => {
    // As the runtime's own errors say it: `overloaded`, and `retryable` (an object reset by a deploy).
    for (const said of [{ overloaded: true }, { retryable: true }]) {
      const down = failingTenants(() => Object.assign(new Error("Durable Object is overloaded. Too many requests queued."), said));
      const unavailable = { status: 503, retryAfter: "1", error: { type: "service_unavailable", code: "key_store_unavailable", param: null, message: "the key store is unavailable; try again shortly" } };
      for (const [method, path] of READS) expect({ said, path, ...(await adminCall(down, method, path)) }).toEqual({ said, path, ...unavailable });
      for (const [method, path, body] of CHANGES) {
        expect({ said, path, ...(await adminCall(down, method, path, body)) }).toEqual({
          said,
          path,
          ...unavailable,
          error: { ...unavailable.error, message: "the key store did not answer: the change may or may not have been made; read the key back (GET /admin/v1/keys) before sending it again" },
        });
      }
    }
  });

  it("answer 500 when the failure is one no retry mends (a bug, a write its storage refused)", async () => {
    const broken = failingTenants(() => new TypeError("Cannot read properties of undefined (reading 'hash')"));
    for (const [method, path, body] of [...READS, ...CHANGES]) {
      const r = await adminCall(broken, method, path, body);
      expect([path, r.status, r.retryAfter, r.error.code]).toEqual([path, 500, null, "internal_error"]);
    }
  });
});
