import { randomBytes } from "node:crypto";
import http from "node:http";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { adminFetch, issuedKey } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * An upstream that sends the end of its answer a byte at a time (a byte an HTTP chunk: workerd
 * hands the Worker one read each). The relay's JavaScript loop keeps a chunk reference for each of
 * them, and a list of 250,000 once overflowed the call stack where it was spread into a call's
 * arguments: the relay threw, its end was never reported, and the request's lease was held for
 * the isolate's life.
 */

const DRIPPED_BYTES = 250_000;
const USAGE = { input_tokens: 5, input_tokens_details: { cached_tokens: 0 }, output_tokens: 1, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 6 };

/** A Responses stream whose closing event (usage first, then the request's instructions, as SGLang lays it out) is long. */
function responsesStream(instructions: unknown): string {
  const event = (type: string, fields: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
  const text = "ok ".repeat(60_000);
  const response = (status: string, output: unknown[], usage: unknown) => ({ id: "resp_d", object: "response", created_at: 1, model: "drip-up", status, output, usage, instructions });
  return (
    event("response.created", { response: response("in_progress", [], null) }) +
    event("response.output_text.delta", { item_id: "msg_d", output_index: 0, content_index: 0, delta: text }) +
    event("response.completed", { response: response("completed", [{ id: "msg_d", type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] }], USAGE) })
  );
}

let upstream: http.Server;
let upstreamUrl: string;
let open = 0;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;

beforeAll(async () => {
  upstream = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => {
      open++;
      res.on("close", () => open--);
      const { instructions } = JSON.parse(Buffer.concat(parts).toString("utf8")) as { instructions?: unknown };
      const body = Buffer.from(responsesStream(instructions ?? null));
      res.writeHead(200, { "content-type": "text/event-stream" });
      const whole = body.length - DRIPPED_BYTES;
      res.write(body.subarray(0, whole));
      for (let at = whole; at < body.length; at++) res.write(body.subarray(at, at + 1));
      res.end();
    });
  });
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as { port: number }).port}`;
  gw = await startTestGateway(
    // restamp: read in the JavaScript loop, which hands each chunk to the hook.
    { modelGroups: [{ name: "drip", hooks: ["restamp"], deployments: [{ id: "d", baseUrl: upstreamUrl, model: "drip-up" }] }] },
    { KVGATE_ADMIN_KEY: adminKey },
  );
});
afterAll(async () => {
  await gw?.close();
  upstream?.closeAllConnections();
  await new Promise<void>((r) => upstream?.close(() => r()));
});

describe("an upstream that drips the end of its answer a byte at a time", () => {
  it("a Responses stream read in the JavaScript loop: the client gets it whole, the key is charged its usage, and the lease is released", async () => {
    const { id, key } = await issuedKey(gw.url, adminKey);
    const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 120_000 });
    // A long request: the tail kept for its usage (three times its length) holds every dripped chunk.
    const instructions = "Follow the house style. ".repeat(4000);
    let reported: OpenAI.Responses.ResponseUsage | undefined;
    for await (const event of await client.responses.create({ model: "drip", instructions, input: "hi", stream: true })) {
      if (event.type === "response.completed") reported = event.response.usage;
    }
    expect(reported).toMatchObject({ input_tokens: 5, output_tokens: 1 });
    await vi.waitFor(async () => expect(await gw.inFlight("drip")).toBe(0), EVENTUALLY);
    expect(open).toBe(0);
    // Usage reaches the tenants object in a batch a second.
    const charged = async () => (await (await adminFetch(gw.url, adminKey, "GET", `/usage?key=${id}`)).json()) as { requests: number };
    await vi.waitFor(async () => expect((await charged()).requests).toBe(1), EVENTUALLY);
    expect(await charged()).toMatchObject({ prompt_tokens: 5, completion_tokens: 1, requests: 1 });
  }, 180_000);
});
