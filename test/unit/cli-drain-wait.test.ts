import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { adminClient } from "../../cli/admin-client.ts";
import { FLEET_COMMANDS } from "../../cli/commands.ts";
import { CliError } from "../../cli/cli-error.ts";

/**
 * `npx kvgate deployments drain --wait` against a gateway whose admin API fails for a moment (a
 * deploy restarts the fleet registry: 503 routing_unavailable with retry-after 1), served on a
 * real socket by a stand-in that answers as the admin API does, in a scripted order.
 */

let server: http.Server | undefined;
let drainsSent = 0;
afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

/** A stand-in admin API: the drain is applied; each read of the deployment answers the next of `reads` (status and body). */
async function adminApi(reads: [number, unknown][]): Promise<string> {
  server = http.createServer((req, res) => {
    const reply = (status: number, body: unknown) => res.writeHead(status, { "content-type": "application/json", ...(status === 503 ? { "retry-after": "1" } : {}) }).end(JSON.stringify(body));
    if (req.method === "POST") return drainsSent++, reply(200, { rev: 7, routing: "applied", changed: ["g"], removed: [] });
    const [status, body] = reads.shift() ?? [500, { error: { message: "no more reads scripted" } }];
    // A connection dropped after the headers, halfway through the body.
    if (status === 0) {
      res.writeHead(200, { "content-type": "application/json", "content-length": "1000" }).write('{"id":');
      return void setTimeout(() => res.socket?.destroy(), 20);
    }
    reply(status, body);
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server?.address() as AddressInfo).port}`;
}

const row = (inFlight: number | null, drained: boolean) => ({ id: "gpu-5", url: "http://gpu-5", model: "m", state: "draining", source: "api", weight: 1, maxInFlight: 8, expiresAt: null, removeAt: null, inFlight, takesRequests: false, drained });
const unavailable: [number, unknown] = [503, { error: { message: "routing unavailable: the fleet registry is starting", type: "server_error", code: "routing_unavailable" } }];

async function drainWait(url: string, flags: { wait?: boolean; timeout?: string } = { wait: true, timeout: "30" }): Promise<{ out: string[]; notes: string[]; error: unknown }> {
  const out: string[] = [];
  const notes: string[] = [];
  const api = adminClient({ KVGATE_URL: url, KVGATE_ADMIN_KEY: "admin-key" });
  const error = await FLEET_COMMANDS["deployments drain"]?.(api, { group: "g", id: "gpu-5", ...flags }, { out: (t) => out.push(t), note: (t) => notes.push(t), sleep: async () => undefined }, []).then(
    () => null,
    (e: unknown) => e,
  );
  return { out, notes, error };
}

describe("npx kvgate deployments drain --timeout", () => {
  it("is a wrong command line without --wait, or at 0 or less: nothing is sent", async () => {
    const url = await adminApi([]);
    drainsSent = 0;
    for (const flags of [{ timeout: "300" }, { wait: true, timeout: "0" }, { wait: true, timeout: "-5" }]) {
      const { error } = await drainWait(url, flags);
      expect(error, JSON.stringify(flags)).toBeInstanceOf(CliError);
      expect((error as CliError).exitCode).toBe(2);
    }
    expect(drainsSent).toBe(0);
  });
});

describe("npx kvgate deployments drain --wait", () => {
  it("waits on through a moment the admin API answers 503 (a deploy restarting the registry), and returns once drained", async () => {
    const url = await adminApi([[200, row(2, false)], unavailable, unavailable, [200, row(0, true)]]);
    const { out, notes, error } = await drainWait(url);
    expect(error).toBeNull();
    expect(out.at(-1)).toBe("gpu-5 is drained: nothing in flight, safe to stop");
    expect(notes.filter((n) => /503/.test(n))).toHaveLength(2);
  });

  it("waits on through a connection dropped halfway through an answer's body", async () => {
    const url = await adminApi([[200, row(2, false)], [0, null], [200, row(0, true)]]);
    const { out, error } = await drainWait(url);
    expect(error).toBeNull();
    expect(out.at(-1)).toBe("gpu-5 is drained: nothing in flight, safe to stop");
  });

  it("ends at once on an answer that is no passing failure: the deployment gone (404)", async () => {
    const url = await adminApi([[200, row(2, false)], [404, { error: { message: "no deployment gpu-5 in group g", type: "invalid_request_error", code: "not_found" } }]]);
    const { error } = await drainWait(url);
    expect(error).toBeInstanceOf(CliError);
    expect((error as CliError).message).toMatch(/404 no deployment gpu-5/);
  });
});
