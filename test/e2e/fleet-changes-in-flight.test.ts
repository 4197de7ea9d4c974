import { randomBytes } from "node:crypto";
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

beforeAll(async () => {
  upstream = await startHeldUpstream();
  gw = await startTestGateway({ modelGroups: [{ name: GROUP, deployments: [{ id: "gpu-0", baseUrl: upstream.url, model: "held" }] }] }, KEYS);
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
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
