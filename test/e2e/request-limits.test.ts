import net from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it, vi } from "vitest";
import OpenAI from "openai";
import { BODY_SHAPE } from "../../src/openai/body-shape.ts";
import type { GatewayConfigInput } from "../../src/config/schema.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startGateway } from "../../bench/harness/gateway.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

let upstream: HostileUpstream;
let gw: TestGateway;

// The default limits, a production-sized body included: 4 MiB.
beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({ modelGroups: [{ name: "limits", deployments: [{ id: "ok", baseUrl: `${upstream.url}/ok`, model: "hostile-7b" }] }] });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
beforeEach(() => upstream.reset());

const MAX_BODY = 4 * 1024 * 1024;
const HEAD = '{"model":"limits","messages":[{"role":"user","content":"hi"}]';

/** `head` + as many `item`s, comma-separated, as keep the body within 4 MiB + `tail`. */
function filled(head: string, item: string, tail: string): string {
  const n = Math.floor((MAX_BODY - head.length - tail.length + 1) / (item.length + 1));
  return head + Array.from({ length: n }, () => item).join(",") + tail;
}

async function post(body: string, path = "/v1/chat/completions"): Promise<{ status: number; error: Record<string, unknown> | undefined }> {
  const res = await fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body });
  const json = (await res.json()) as { error?: Record<string, unknown> };
  return { status: res.status, error: json.error };
}

describe("work per request is bounded before it is done", () => {
  it("a valid 4 MiB body of a million empty tools is refused with a 400 naming tools, and the upstream never sees it", async () => {
    const body = filled(`${HEAD},"tools":[`, "{}", "]}");
    expect(body.length).toBeGreaterThan(MAX_BODY - 4);
    expect(body.length).toBeLessThanOrEqual(MAX_BODY);
    const r = await post(body);
    expect(r.status).toBe(400);
    expect(r.error).toMatchObject({ type: "invalid_request_error", param: "tools", code: "json_too_complex" });
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it("so is 4 MiB of small arrays nested 127 deep in a field the gateway passes through", async () => {
    const r = await post(filled(`${HEAD},"x":[`, "[".repeat(126) + "]".repeat(126), "]}"));
    expect(r.status).toBe(400);
    expect(r.error).toMatchObject({ param: "x", code: "json_too_complex" });
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it("a body over limits.maxMessages is refused for its count before the schema reads a message", async () => {
    // Not one message is valid: an error about the count shows none was looked at.
    const r = await post(`{"model":"limits","messages":[${Array.from({ length: 4097 }, () => "0").join(",")}]}`);
    expect(r.status).toBe(400);
    expect(r.error).toMatchObject({ param: "messages", code: "invalid_request", message: "messages has 4097 items, more than the limit of 4096" });
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it("so is an embeddings body of chat-style messages (vLLM's form) over limits.maxMessages", async () => {
    const r = await post(`{"model":"limits","messages":[${Array.from({ length: 4097 }, () => "0").join(",")}]}`, "/v1/embeddings");
    expect(r.status).toBe(400);
    expect(r.error).toMatchObject({ param: "messages", message: "messages has 4097 items, more than the limit of 4096" });
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it("131,072 objects, arrays and keys are served; one more is refused, naming the field", async () => {
    // HEAD holds 8 (the body, 3 keys with "x", the messages array, a message and its 2 keys); "x" adds its array.
    const body = (nodes: number) => `${HEAD},"x":[${Array.from({ length: nodes - 9 }, () => "{}").join(",")}]}`;
    expect((await post(body(BODY_SHAPE.maxNodes))).status).toBe(200);
    expect(upstream.stats("ok").requests).toBe(1);
    const over = await post(body(BODY_SHAPE.maxNodes + 1));
    expect(over.status).toBe(400);
    expect(over.error).toMatchObject({ param: "x", code: "json_too_complex" });
    expect(upstream.stats("ok").requests).toBe(1);
  });

  it("a 4 MiB body of plain text is served: the bounds are on what a body holds, not on its size", async () => {
    const body = `${HEAD.slice(0, -1)},{"role":"user","content":"${"x".repeat(MAX_BODY - HEAD.length - 40)}"}]}`;
    expect(body.length).toBeLessThanOrEqual(MAX_BODY);
    expect((await post(body)).status).toBe(200);
    expect(upstream.stats("ok").requests).toBe(1);
  });
});

/** A gateway to send a raw request to, whichever way it was started. */
interface Served {
  url: string;
  key: string;
  close(): Promise<void>;
}

interface RawClient {
  socket: net.Socket;
  received: () => string;
  failed: () => Error | null;
}

/**
 * A client on a raw socket that has sent a POST's head with `headers` (after its host): what came
 * back so far, and the socket's error (a write that met a closed connection: EPIPE), if any.
 */
async function rawPost(headers: string[], url = gw.url): Promise<RawClient> {
  const u = new URL(url);
  const socket = net.connect(Number(u.port), u.hostname);
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
  let received = "";
  let failed: Error | null = null;
  socket.setEncoding("utf8").on("data", (d: string) => (received += d));
  socket.on("error", (e) => (failed = e));
  socket.write(`${["POST /v1/chat/completions HTTP/1.1", `host: ${u.host}`, ...headers].join("\r\n")}\r\n\r\n`);
  return { socket, received: () => received, failed: () => failed };
}

/** Once `socket` can take more writes, or has closed. */
function drained(socket: net.Socket): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      socket.off("drain", done).off("close", done);
      resolve();
    };
    socket.once("drain", done).once("close", done);
  });
}

/**
 * Sends `bytes` of body, as a client does: all of it, with backpressure, before it reads the
 * answer; chunked, or as the declared length's bytes. Stops at a write that failed.
 */
async function upload({ socket, failed }: RawClient, bytes: number, chunked: boolean): Promise<void> {
  const part = "x".repeat(64 * 1024);
  const frame = chunked ? `${part.length.toString(16)}\r\n${part}\r\n` : part;
  for (let sent = 0; sent < bytes && failed() === null; sent += part.length) {
    if (!socket.write(frame)) await drained(socket);
  }
  if (chunked && failed() === null) socket.write("0\r\n\r\n");
}

describe("a request refused before its body is read gets its answer, not a broken connection", () => {
  // workerd closes a connection whose request body is left unread: a client still sending a
  // body of a few MB (an SDK uploads all of it before reading) met EPIPE, "Connection error",
  // and retried the same body twice more.
  const sdk = (apiKey: string) => {
    const sent = { count: 0 };
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey, maxRetries: 2, fetch: (url, init) => (sent.count++, fetch(url, init)) });
    return { client, sent };
  };
  /** Three tries, as the failure was a race: the errors, and the HTTP requests the SDK sent for them. */
  const askWith = async (apiKey: string, model: string, bytes: number) => {
    const { client, sent } = sdk(apiKey);
    const errors: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      errors.push(await client.chat.completions.create({ model, messages: [{ role: "user", content: "x".repeat(bytes) }] }).then(() => null, (e: unknown) => e));
    }
    return { errors, sent: sent.count };
  };

  it.each([5, 16])("a %i MiB body over the limit is answered, each time at the first request, 413 body_too_large", async (mib) => {
    const r = await askWith(gw.key, "limits", mib * 1024 * 1024);
    for (const e of r.errors) expect(e).toMatchObject({ status: 413, code: "body_too_large" });
    expect(r.sent).toBe(3);
    expect(upstream.stats("ok").requests).toBe(0);
  });

  it.each([5, 16])("a %i MiB body with a wrong key is answered, each time at the first request, 401", async (mib) => {
    const r = await askWith("sk-not-a-key", "limits", mib * 1024 * 1024);
    for (const e of r.errors) expect(e).toMatchObject({ status: 401 });
    expect(r.sent).toBe(3);
  });

  it("a client that declares a body and then stops sending it still gets its 401: the wait for the body is bounded", async () => {
    // Else a client with no key could hold each request open as long as it liked, a byte at a time.
    const { socket, received } = await rawPost(["authorization: Bearer sk-not-a-key", "content-type: application/json", `content-length: ${1024 * 1024}`]);
    socket.write("{");
    try {
      await vi.waitFor(() => expect(received()).toMatch(/^HTTP\/1\.1 401 /), { timeout: 25_000, interval: 100 });
      expect(received()).toContain("invalid API key");
    } finally {
      socket.destroy();
    }
  }, 30_000);

  it("a slow upload that keeps coming, past the 10 s the wait for a stopped one lasts, gets its 401 after its last byte", async () => {
    // A 30 MB body on a slow uplink takes longer than 10 s; only a client that stops sending is cut.
    const parts = 7;
    const part = "x".repeat(1024);
    const { socket, received, failed } = await rawPost(["authorization: Bearer sk-not-a-key", "content-type: application/json", `content-length: ${parts * part.length}`]);
    try {
      for (let i = 0; i < parts; i++) {
        // Nothing answered while the body still comes.
        expect(received()).toBe("");
        socket.write(part);
        if (i < parts - 1) await new Promise((r) => setTimeout(r, 2_000));
      }
      await vi.waitFor(() => expect(received()).toMatch(/^HTTP\/1\.1 401 /), { timeout: 10_000, interval: 50 });
      expect(failed()).toBeNull();
    } finally {
      socket.destroy();
    }
  }, 30_000);

  it("a chunked body (no declared length) over the limit gets its 413 body_too_large, not a broken pipe: the rest of it is read", async () => {
    // The limit is passed while counting the chunks as they come (fetch with a stream body, curl -T -, a re-chunking proxy).
    const client = await rawPost([`authorization: Bearer ${gw.key}`, "content-type: application/json", "transfer-encoding: chunked"]);
    const { socket, received, failed } = client;
    try {
      // The limit and 16 MiB more: 1 MiB more fits in loopback's socket buffers and passes even unread.
      await upload(client, MAX_BODY + 16 * 1024 * 1024, true);
      await vi.waitFor(() => expect(received()).toContain("body_too_large"), { timeout: 10_000, interval: 50 });
      expect([received().split("\r\n")[0], failed()]).toEqual(["HTTP/1.1 413 Payload Too Large", null]);
      expect(upstream.stats("ok").requests).toBe(0);
    } finally {
      socket.destroy();
    }
  }, 30_000);

  it("a body within the limit for a model that does not exist is answered, each time at the first request, 404", async () => {
    const r = await askWith(gw.key, "no-such-model", 3 * 1024 * 1024);
    for (const e of r.errors) expect(e).toMatchObject({ status: 404 });
    expect(r.sent).toBe(3);
  });
});

describe("an answer given before the app reaches a client still uploading its body, not a broken pipe", () => {
  // The gateway answers these before its app runs, so the app's wait for the body was not theirs:
  // a 16 MiB upload met EPIPE after the status line (a declared length), or before any answer (chunked).
  const lacking = { name: "m-lacking", deployments: [{ baseUrl: "https://gpu.example", model: "sim-7b", headersFromEnv: { "CF-Access-Client-Secret": "NOT_SET_ACCESS_SECRET" } }] };
  const served = async (config: GatewayConfigInput): Promise<Served> => {
    const g = await startTestGateway(config);
    return { url: g.url, key: g.key, close: () => g.close() };
  };
  /**
   * A gateway whose Durable Objects run in a workerd of their own, killed before any request: its
   * fleet registry cannot be reached. For one request: after a first call failed, Miniflare's dev
   * registry may reach a registry again.
   */
  const registryDown = async (): Promise<Served> => {
    const g = await startGateway({ config: { modelGroups: [lacking] }, scriptPath: inject("gatewayScript"), objectsApart: true, onLog: () => undefined });
    const objects = g.pids?.object;
    if (objects === undefined) throw new Error("served apart, but its objects' workerd is not named");
    process.kill(objects, "SIGKILL");
    return { url: g.url, key: g.key, close: () => g.dispose() };
  };
  it.each([
    ["a config that does not load", "500 Internal Server Error", "config_invalid", () => served({ modelGroups: "none" } as unknown as GatewayConfigInput)],
    ["a deploy lacking a secret its modelGroups name", "500 Internal Server Error", "config_invalid", () => served({ modelGroups: [lacking] })],
    ["a fleet registry that cannot be reached", "503 Service Unavailable", "routing_unavailable", registryDown],
  ])("%s: a 16 MiB body, declared or chunked, gets its %s %s", async (_, status, code, start) => {
    const framings = [`content-length: ${16 * 1024 * 1024}`, "transfer-encoding: chunked"];
    const outcomes: unknown[] = [];
    for (const framing of framings) {
      const g = await start();
      const client = await rawPost([`authorization: Bearer ${g.key}`, "content-type: application/json", framing], g.url);
      try {
        await upload(client, 16 * 1024 * 1024, framing.startsWith("transfer-encoding"));
        await vi.waitFor(() => expect(client.received().includes(code) || client.socket.closed).toBe(true), { timeout: 10_000, interval: 50 });
        outcomes.push([framing, client.received().split("\r\n")[0], client.failed()?.message ?? null]);
      } finally {
        client.socket.destroy();
        await g.close();
      }
    }
    expect(outcomes).toEqual(framings.map((f) => [f, `HTTP/1.1 ${status}`, null]));
  }, 60_000);
});
