import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { rawPost } from "./client.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

let upstream: HostileUpstream;
let gw: TestGateway;

const deployment = (behaviour: string, extra: Record<string, unknown> = {}) => ({ id: behaviour, baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b", ...extra });

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({
    modelGroups: [
      { name: "endless", deployments: [deployment("endless-stream")] },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const CHAT = "/v1/chat/completions";
const ask = (model: string, stream: boolean) => ({ model, stream, messages: [{ role: "user", content: "hello" }] });

describe("a client that leaves", () => {
  it("mid-stream, while the upstream is still sending: the upstream request is cancelled and the slot freed within 2 s", async () => {
    const c = await rawPost(gw.url, CHAT, ask("endless", true), { authorization: `Bearer ${gw.key}` });
    await c.waitFor(/tick/);
    expect(await gw.inFlight("endless")).toBe(1);
    const leftAt = Date.now();
    c.close();
    await vi.waitFor(() => expect(upstream.stats("endless-stream").open).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("endless")).toBe(0), EVENTUALLY);
    expect(Date.now() - leftAt).toBeLessThan(2000);
    const s = await gw.status("endless");
    expect(s.backends[0]?.aborted).toBe(1);
    expect(s.backends[0]?.failed).toBe(0);
  });
});
