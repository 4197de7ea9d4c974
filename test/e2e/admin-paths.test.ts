import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";
import { kvgate as runKvgate, type Ran } from "./npm-start-cli.ts";

/**
 * The admin API addresses a group and a deployment by name in its path
 * (/admin/v1/groups/{group}/deployments/{id}). A name "." or ".." is a dot segment there: every
 * HTTP client (fetch, curl, the CLI) takes it out of the path before sending, escaped or not, so
 * `deployments remove --id ..` would reach the gateway as DELETE /admin/v1/groups/{group} and
 * remove the whole group. Through the bundled gateway on a real socket and the CLI as typed.
 */

const KEYS = { KVGATE_ADMIN_KEY: `sk-admin-${randomBytes(16).toString("hex")}`, KVGATE_REGISTER_KEY: `sk-register-${randomBytes(16).toString("hex")}` };

let upstream: HostileUpstream;
let gw: TestGateway;
let ok: string;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  ok = `${upstream.url}/ok`;
  gw = await startTestGateway({ modelGroups: [{ name: "paths", deployments: [{ id: "gpu-0", baseUrl: ok, model: "m" }] }] }, KEYS);
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const kvgate = (args: string[]): Promise<Ran> => runKvgate(args, { KVGATE_URL: gw.url, KVGATE_ADMIN_KEY: KEYS.KVGATE_ADMIN_KEY });

async function call(method: string, path: string, body: unknown, key = KEYS.KVGATE_ADMIN_KEY): Promise<{ status: number; param?: string | null; message?: string }> {
  const res = await fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  const answer = (await res.json()) as { error?: { param: string | null; message: string } };
  return { status: res.status, ...(answer.error ? { param: answer.error.param, message: answer.error.message } : {}) };
}

const ids = async (): Promise<string[]> => {
  const res = await fetch(`${gw.url}/admin/v1/groups/paths/deployments`, { headers: { authorization: `Bearer ${KEYS.KVGATE_ADMIN_KEY}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: { id: string }[] }).data.map((d) => d.id);
};

describe('a group or deployment named "." or ".."', () => {
  it("is refused wherever it would enter the fleet: the admin API could never address it", async () => {
    for (const name of [".", ".."]) {
      const refused = { status: 400, message: expect.stringMatching(/must not be "\." or "\.\."/) as string };
      expect(await call("POST", "/groups/paths/deployments", { id: name, baseUrl: `${ok}-a`, model: "m" }), name).toMatchObject({ ...refused, param: "id" });
      expect(await call("POST", "/heartbeats", { group: "paths", id: name, baseUrl: `${ok}-b`, model: "m" }, KEYS.KVGATE_REGISTER_KEY), name).toMatchObject({ ...refused, param: "id" });
      expect(await call("POST", "/groups", { name, deployments: [] }), name).toMatchObject({ ...refused, param: "name" });
      expect(await call("POST", "/groups", { name: "other", deployments: [{ id: name, baseUrl: ok, model: "m" }] }), name).toMatchObject({ ...refused, param: "deployments[0].id" });
    }
    expect(await ids()).toEqual(["gpu-0"]);
  });

  it("is refused by the CLI before it sends anything: `deployments remove --id ..` does not remove the group", async () => {
    for (const args of [
      ["deployments", "remove", "--group", "paths", "--id", ".."],
      ["deployments", "drain", "--group", "paths", "--id", "."],
      ["deployments", "list", "--group", ".."],
    ]) {
      const r = await kvgate(args);
      expect({ args, code: r.code, first: r.stderr[0], stdout: r.stdout }).toEqual({ args, code: 2, first: expect.stringMatching(/^kvgate: --(id|group) cannot be "\.\.?": /) as string, stdout: "" });
    }
    expect(await ids()).toEqual(["gpu-0"]);
  }, 60_000);
});
