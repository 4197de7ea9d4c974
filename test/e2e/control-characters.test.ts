import { describe, expect, it } from "vitest";
import { adminCall, useAdminGateway } from "./admin-gateway.ts";

/**
 * A deployment's id and a group's name are one rule wherever they enter the fleet: the config,
 * `POST /groups`, a deployment added, a fleet put whole, a heartbeat. No control characters: an id
 * is the answer's x-kvgate-backend header (a line feed there and the runtime cannot build the
 * answer), a log field and a cell of `npx kvgate deployments list` (an escape sequence there
 * rewrites the operator's terminal), and the register key that sends heartbeats is on every GPU
 * server. A baseUrl is shown in the same places, so it holds none either. Through the bundled
 * gateway on a real socket; what is refused changes nothing, and requests go on being served.
 */

const at = useAdminGateway("names");
const KEYS = at.keys;

const call = (method: string, path: string, body: unknown, key = KEYS.KVGATE_ADMIN_KEY) => adminCall(at.gw.url, key, method, path, body);

const refused = (param: string) => ({ status: 400, error: { type: "invalid_request_error", code: "invalid_value", param, message: expect.stringMatching(/must not contain control characters/) as string } });

const deploymentIds = async () => ((await (await fetch(`${at.gw.url}/admin/v1/groups/names/deployments`, { headers: { authorization: `Bearer ${KEYS.KVGATE_ADMIN_KEY}` } })).json()) as { data: { id: string; url: string }[] }).data;

describe("control characters in a deployment id, a group name or a baseUrl", () => {
  it("are refused from the admin API and from heartbeats, as the config and POST /groups refuse them; the fleet stays as it was", async () => {
    for (const id of ["tab\there\nnl", "evil\r\nset-cookie: a=b", "gpu\u001b[2J", "c1\u009b31m"]) {
      expect(await call("POST", "/groups/names/deployments", { id, baseUrl: `${at.upstream.url}/ok-admin`, model: "m" }), JSON.stringify(id)).toMatchObject(refused("id"));
      expect(await call("POST", "/heartbeats", { group: "names", id, baseUrl: `${at.upstream.url}/ok-beat`, model: "m" }, KEYS.KVGATE_REGISTER_KEY), JSON.stringify(id)).toMatchObject(refused("id"));
      expect(await call("POST", "/groups", { name: "other", deployments: [{ id, baseUrl: at.ok, model: "m" }] })).toMatchObject(refused("deployments[0].id"));
    }
    expect(await call("POST", "/heartbeats", { group: "names\u001b[2J", id: "beat", baseUrl: at.ok, model: "m" }, KEYS.KVGATE_REGISTER_KEY)).toMatchObject(refused("group"));

    // ESC in its path: the URL parser would send it percent-encoded, but the text is what the admin API and the CLI show.
    const escaped = `${at.upstream.url}/ok/\u001b[31mred`;
    expect(await call("POST", "/groups/names/deployments", { id: "url", baseUrl: escaped, model: "m" })).toMatchObject(refused("baseUrl"));
    expect(await call("POST", "/heartbeats", { group: "names", id: "url", baseUrl: escaped, model: "m" }, KEYS.KVGATE_REGISTER_KEY)).toMatchObject(refused("baseUrl"));
    expect(await call("PATCH", "/groups/names/deployments/gpu-0", { baseUrl: escaped })).toMatchObject(refused("baseUrl"));
    expect(await call("PUT", "/fleet", { modelGroups: [{ name: "names", deployments: [{ id: "gpu-0", baseUrl: escaped, model: "m" }] }] })).toMatchObject(refused("modelGroups[0].deployments[0].baseUrl"));

    expect(await deploymentIds()).toEqual([expect.objectContaining({ id: "gpu-0", url: at.ok })]);
    const res = await fetch(`${at.gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${at.gw.key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "names", messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-backend")).toBe("gpu-0");
    await res.arrayBuffer();
  });
});
