import http from "node:http";
import type { Duplex } from "node:stream";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { WebSocketServer } from "ws";
import { connect, opened } from "../support/websocket-client.ts";
import { adminKeys, issuedKey } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * The request id an engine is sent. vLLM takes the `x-request-id` header it receives as the
 * engine's own request id (`chatcmpl-<id>`), tracks the request by it and aborts it by it when its
 * client leaves: a tenant naming the id another tenant chose (a predictable one) must not reach the
 * engine as that same id. Through the path a client takes: the bundled gateway on a real socket,
 * keys made through the admin API, the official OpenAI SDK, and an upstream that records the
 * `x-request-id` of every chat request and realtime handshake it receives.
 */

/** The x-request-id of each chat request, then of each realtime handshake, the upstream received. */
const chats: (string | undefined)[] = [];
const handshakes: (string | undefined)[] = [];
let server: http.Server;
let upstreamUrl: string;
let gw: TestGateway;
const keys = adminKeys();
let alice: { id: string; key: string };
let mallory: { id: string; key: string };

const ANSWER = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "m",
  choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});

beforeAll(async () => {
  const wss = new WebSocketServer({ noServer: true });
  server = http.createServer((req, res) => {
    if (req.method === "POST" && req.url?.endsWith("/chat/completions")) chats.push(req.headers["x-request-id"] as string | undefined);
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(ANSWER));
  });
  server.on("upgrade", (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    handshakes.push(req.headers["x-request-id"] as string | undefined);
    wss.handleUpgrade(req, socket, head, () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no address");
  upstreamUrl = `http://127.0.0.1:${address.port}`;
  gw = await startTestGateway({ modelGroups: [{ name: "m", deployments: [{ id: "gpu-0", baseUrl: upstreamUrl, model: "m" }] }] }, keys);
  alice = await issuedKey(gw.url, keys.KVGATE_ADMIN_KEY);
  mallory = await issuedKey(gw.url, keys.KVGATE_ADMIN_KEY);
});
afterAll(async () => {
  await gw?.close();
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

/** A chat request with `key`, with `requestId` as its x-request-id when given: the answer's x-request-id, and the id the engine was sent. */
async function chatWith(key: string, requestId?: string): Promise<{ answered: string | null; engine: string | undefined }> {
  const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const before = chats.length;
  const { response } = await client.chat.completions
    .create({ model: "m", messages: [{ role: "user", content: "hello" }] }, requestId === undefined ? {} : { headers: { "x-request-id": requestId } })
    .withResponse();
  expect(chats.length).toBe(before + 1);
  return { answered: response.headers.get("x-request-id"), engine: chats.at(-1) };
}

/** The request log lines the gateway wrote for request id `id`. */
function logLinesOf(id: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const l of gw.logs) {
    const at = l.indexOf('{"type":"request"');
    if (at < 0) continue;
    const line = JSON.parse(l.slice(at)) as Record<string, unknown>;
    if (line.request_id === id) out.push(line);
  }
  return out;
}

describe("a virtual key's own x-request-id", () => {
  it("reaches the engine under the key's id: two keys naming the same id send the engine two ids, and each client reads back its own", async () => {
    const a = await chatWith(alice.key, "order-42");
    const m = await chatWith(mallory.key, "order-42");
    expect(a.engine).not.toBe(m.engine);
    expect(a.engine).toBe(`${alice.id}:order-42`);
    expect(m.engine).toBe(`${mallory.id}:order-42`);
    // Correlation is the header's point: the client reads its own id back, and the log line carries it.
    expect([a.answered, m.answered]).toEqual(["order-42", "order-42"]);
    await vi.waitFor(() => expect(logLinesOf("order-42").map((l) => l.key_id).sort()).toEqual([alice.id, mallory.id].sort()), EVENTUALLY);
  });

  it("leaves no id another key can send: one naming another key's engine id still reaches the engine under its own key's", async () => {
    const m = await chatWith(mallory.key, `${alice.id}:order-42`);
    expect(m.engine).toBe(`${mallory.id}:${alice.id}:order-42`);
    expect(m.answered).toBe(`${alice.id}:order-42`);
  });

  it("is the gateway's own UUID when the client sent none, and that reaches the engine under the key's id too", async () => {
    const a = await chatWith(alice.key);
    expect(a.answered).toMatch(/^[0-9a-f-]{36}$/);
    expect(a.engine).toBe(`${alice.id}:${a.answered}`);
  });

  it("is the master key's to send as it is: the operator owns the deployment", async () => {
    expect(await chatWith(gw.key, "ops-trace-1")).toEqual({ answered: "ops-trace-1", engine: "ops-trace-1" });
  });

  it("reaches the engine under the key's id on a realtime handshake too", async () => {
    const ws = `${gw.url.replace(/^http/, "ws")}/v1/realtime?model=m`;
    for (const k of [alice, mallory]) {
      const s = opened(await connect(ws, { headers: { authorization: `Bearer ${k.key}`, "x-request-id": "live-7" } }));
      expect(s.headers["x-request-id"]).toBe("live-7");
      s.ws.close();
    }
    expect(handshakes).toEqual([`${alice.id}:live-7`, `${mallory.id}:live-7`]);
  });
});
