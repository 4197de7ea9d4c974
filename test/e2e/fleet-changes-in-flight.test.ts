import { randomBytes } from "node:crypto";
import http from "node:http";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { FleetStatus } from "../../src/fleet/admin-api.ts";
import { startHeldUpstream, type HeldUpstream } from "../support/held-upstream.ts";
import { adminCall } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";
import { kvgate as runKvgate } from "./npm-start-cli.ts";

/**
 * The fleet changed while requests are in flight on the deployments it changes: what an operator
 * reads of them (`npx kvgate status`) while they finish. Through the bundled gateway on a real
 * socket, an upstream that answers when the test says, and the CLI as typed.
 */

const KEYS = { KVGATE_ADMIN_KEY: `sk-admin-${randomBytes(16).toString("hex")}` };
const GROUP = "in-flight";

let upstream: HeldUpstream;
let gw: TestGateway;
// The first server fails what it is sent, once the test lets it answer; the second answers at once.
let letFail: () => void = () => {};
let failingAsked!: () => void;
const failingWasAsked = new Promise<void>((r) => (failingAsked = r));
const failing = http.createServer((req, res) => {
  req.resume();
  failingAsked();
  letFail = () => res.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "engine failed", type: "server_error" } }));
});
const answering = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "chatcmpl-1", object: "chat.completion", created: 1, model: "served", choices: [{ index: 0, message: { role: "assistant", content: "from the new group" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 } })));
});
const urlOf = (server: http.Server) => `http://127.0.0.1:${(server.address() as { port: number }).port}`;

beforeAll(async () => {
  upstream = await startHeldUpstream();
  await Promise.all([failing, answering].map((server) => new Promise<void>((r) => server.listen(0, "127.0.0.1", r))));
  gw = await startTestGateway({
    modelGroups: [
      { name: GROUP, deployments: [{ id: "gpu-0", baseUrl: upstream.url, model: "held" }] },
      // One deployment id in both groups: ids name deployments within their group only.
      { name: "moving-from", aliases: ["moving-model"], deployments: [{ id: "gpu-x", baseUrl: urlOf(failing), model: "served" }] },
      { name: "moving-to", deployments: [{ id: "gpu-x", baseUrl: urlOf(answering), model: "served" }] },
    ],
  }, KEYS);
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  for (const server of [failing, answering]) server.close();
});

async function groupStatus(): Promise<FleetStatus["groups"][number] | undefined> {
  const r = await runKvgate(["status", "--json"], { KVGATE_URL: gw.url, KVGATE_ADMIN_KEY: KEYS.KVGATE_ADMIN_KEY });
  expect(r.code).toBe(0);
  return (JSON.parse(r.stdout) as FleetStatus).groups.find((g) => g.name === GROUP);
}

describe("a deployment removed while a stream is in flight on it", () => {
  it("counts the stream in the group's in flight until it ends whole, then none", async () => {
    const res = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: GROUP, stream: true, messages: [{ role: "user", content: "a long answer" }] }),
    });
    await upstream.receivedAtLeast(1);
    expect(await groupStatus()).toMatchObject({ deployments: 1, inFlight: 1 });
    expect((await adminCall(gw.url, KEYS.KVGATE_ADMIN_KEY, "DELETE", `/groups/${GROUP}/deployments/gpu-0`)).status).toBe(200);
    // The server is still answering: an operator reading the status must not take it for idle and stop it.
    expect(await groupStatus()).toMatchObject({ deployments: 0, takingRequests: 0, inFlight: 1 });
    upstream.release();
    const answer = await res;
    expect(answer.status).toBe(200);
    expect((await answer.text()).trimEnd().endsWith("data: [DONE]")).toBe(true);
    await vi.waitFor(async () => expect(await groupStatus()).toMatchObject({ inFlight: 0 }), EVENTUALLY);
  });
});

describe("a request failing over while its model moves to another group", () => {
  it("goes on to the new group's backends, though one has the id of the backend it failed on", async () => {
    const res = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "moving-model", messages: [{ role: "user", content: "hello" }] }),
    });
    await failingWasAsked;
    expect((await adminCall(gw.url, KEYS.KVGATE_ADMIN_KEY, "DELETE", "/groups/moving-from")).status).toBe(200);
    expect((await adminCall(gw.url, KEYS.KVGATE_ADMIN_KEY, "PATCH", "/groups/moving-to", { aliases: ["moving-model"] })).status).toBe(200);
    letFail();
    const answer = await res;
    expect([answer.status, answer.headers.get("x-kvgate-attempts")], await answer.clone().text()).toEqual([200, "2"]);
    expect(((await answer.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe("from the new group");
  });
});
