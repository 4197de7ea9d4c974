import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { JAVASCRIPT_PATHS, javascriptPathGroups, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Streams the gateway reads in JavaScript (a chunk hook, a stall bound, a usage event to take out)
 * pass on whole events only; an event larger than that path holds (EVENT_HOLD_MAX_BYTES) goes to
 * the client as it comes instead of being held whole in the isolate.
 */

let upstream: HostileUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({
    modelGroups: [
      ...javascriptPathGroups("unended", { id: "unended", baseUrl: `${upstream.url}/unended-event:4096`, model: "hostile-7b" }),
      { name: "big-restamped-stripped", hooks: ["restamp"], feedback: { sampleRate: 1 }, deployments: [{ id: "big", baseUrl: `${upstream.url}/big-event:2048`, model: "hostile-7b" }] },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

function stream(model: string): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "hello" }] }),
  });
}

describe("an event larger than the JavaScript path holds", () => {
  it.each(JAVASCRIPT_PATHS)("reaches the client as it comes, while its end has not come (%s)", async (way) => {
    upstream.reset();
    const res = await stream(`unended-${way}`);
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let received = 0;
    void (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        received += value.length;
      }
    })().catch(() => {});
    // The upstream wrote its 4 MiB and holds the connection open: the client has them all the same.
    await vi.waitFor(() => expect(received).toBeGreaterThan(4096 * 1024), { timeout: 20_000, interval: 50 });
    expect(upstream.stats("unended-event").open).toBe(1);
    // No keep-alive comment can go inside an event: the client's leaving is found at the upstream's next byte, as on the fast path.
    await reader.cancel();
  });

  it("reaches the client whole and rewritten, the events after it too", async () => {
    const res = await stream("big-restamped-stripped");
    const events = (await res.text()).split("\n\n").filter(Boolean);
    expect(events).toHaveLength(3);
    const big = JSON.parse((events[1] as string).slice("data: ".length)) as { model: string; choices: { delta: { content: string } }[] };
    expect(big.model).toBe("big-restamped-stripped");
    expect(big.choices[0]?.delta.content).toBe("x".repeat(2048 * 1024));
    expect(events[2]).toBe("data: [DONE]");
  });
});
