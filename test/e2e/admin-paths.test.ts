import { describe, expect, it } from "vitest";
import { adminCall, useAdminGateway } from "./admin-gateway.ts";
import { kvgate as runKvgate, type Ran } from "./npm-start-cli.ts";

/**
 * The admin API addresses a group and a deployment by name in its path
 * (/admin/v1/groups/{group}/deployments/{id}). A name "." or ".." is a dot segment there: every
 * HTTP client (fetch, curl, the CLI) takes it out of the path before sending, escaped or not, so
 * `deployments remove --id ..` would reach the gateway as DELETE /admin/v1/groups/{group} and
 * remove the whole group. Through the bundled gateway on a real socket and the CLI as typed.
 */

const at = useAdminGateway("paths");
const KEYS = at.keys;

const kvgate = (args: string[]): Promise<Ran> => runKvgate(args, { KVGATE_URL: at.gw.url, KVGATE_ADMIN_KEY: KEYS.KVGATE_ADMIN_KEY });
const call = (method: string, path: string, body: unknown, key = KEYS.KVGATE_ADMIN_KEY) => adminCall(at.gw.url, key, method, path, body);

const ids = async (): Promise<string[]> => {
  const res = await fetch(`${at.gw.url}/admin/v1/groups/paths/deployments`, { headers: { authorization: `Bearer ${KEYS.KVGATE_ADMIN_KEY}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: { id: string }[] }).data.map((d) => d.id);
};

describe('a group or deployment named "." or ".."', () => {
  it("is refused wherever it would enter the fleet: the admin API could never address it", async () => {
    for (const name of [".", ".."]) {
      const refused = (param: string) => ({ status: 400, error: { param, message: expect.stringMatching(/must not be "\." or "\.\."/) as string } });
      expect(await call("POST", "/groups/paths/deployments", { id: name, baseUrl: `${at.ok}-a`, model: "m" }), name).toMatchObject(refused("id"));
      expect(await call("POST", "/heartbeats", { group: "paths", id: name, baseUrl: `${at.ok}-b`, model: "m" }, KEYS.KVGATE_REGISTER_KEY), name).toMatchObject(refused("id"));
      expect(await call("POST", "/groups", { name, deployments: [] }), name).toMatchObject(refused("name"));
      expect(await call("POST", "/groups", { name: "other", deployments: [{ id: name, baseUrl: at.ok, model: "m" }] }), name).toMatchObject(refused("deployments[0].id"));
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
