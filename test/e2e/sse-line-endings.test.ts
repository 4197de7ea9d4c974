import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { JAVASCRIPT_PATHS, javascriptPathGroups, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * An upstream whose SSE lines end with a lone CR (legal SSE, if no inference server's habit), on
 * the streams the gateway reads in JavaScript: each event reaches the client as it comes, and a
 * usage event the client did not ask for is taken out.
 */

let upstream: HostileUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({ modelGroups: javascriptPathGroups("cr", { id: "cr", baseUrl: `${upstream.url}/cr-stream:1000`, model: "hostile-7b" }) });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

/** The stream's text, and what of it had come when its first event did. */
async function read(model: string): Promise<{ text: string; atFirst: string }> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "hello" }] }),
  });
  expect(res.status).toBe(200);
  const decoder = new TextDecoder();
  let text = "";
  let atFirst = "";
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  for (let step = await reader.read(); !step.done; step = await reader.read()) {
    text += decoder.decode(step.value, { stream: true });
    if (!atFirst && text.includes('"first"')) atFirst = text;
  }
  return { text, atFirst };
}

describe("a stream whose lines end with a lone CR", () => {
  it.each(JAVASCRIPT_PATHS)("reaches the client event by event, not at the stream's end (%s)", async (way) => {
    const { text, atFirst } = await read(`cr-${way}`);
    // The upstream waits a second after its first event: the client had it before the rest.
    expect(atFirst).not.toContain("[DONE]");
    expect(text).toContain('"second"');
    expect(text.endsWith("data: [DONE]\r\r")).toBe(true);
  });

  it("loses the usage event the gateway asked for and the client did not", async () => {
    const { text } = await read("cr-stripped");
    expect(upstream.stats("cr-stream").bodies.at(-1)).toMatchObject({ stream_options: { include_usage: true } });
    expect(text).not.toContain('"usage":{');
    expect(text.split("\r\r").filter(Boolean)).toHaveLength(3);
  });
});
