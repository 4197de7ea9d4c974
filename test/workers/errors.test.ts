import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { TEST_LIMITS } from "../support/test-config.ts";
import { chat, conversation, EVENTUALLY, expectIdle, gateway, inFlight, type ChatMessage } from "./gateway.ts";

const post = (body: string, headers: Record<string, string> = {}, auth = true) =>
  gateway("/v1/chat/completions", { method: "POST", body, headers: { "content-type": "application/json", ...headers } }, auth);
const msg: ChatMessage[] = [{ role: "user", content: "hi" }];

interface Case {
  name: string;
  send: () => Promise<Response>;
  status: number;
  type: string;
  param?: string | null;
  message?: RegExp;
  headers?: Record<string, string>;
}

const cases: Case[] = [
  { name: "malformed JSON", send: () => post('{"model": "errors", '), status: 400, type: "invalid_request_error", message: /not valid JSON/ },
  { name: "invalid UTF-8", send: () => gateway("/v1/chat/completions", { method: "POST", body: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]) }), status: 400, type: "invalid_request_error", message: /UTF-8/ },
  { name: "a body that is not an object", send: () => post("[1,2]"), status: 400, type: "invalid_request_error" },
  { name: "messages missing", send: () => post(JSON.stringify({ model: "errors" })), status: 400, type: "invalid_request_error", param: "messages", message: /messages is required/ },
  { name: "a message without a role", send: () => post(JSON.stringify({ model: "errors", messages: [{ content: "x" }] })), status: 400, type: "invalid_request_error", param: "messages[0].role" },
  { name: "max_tokens of the wrong type", send: () => post(JSON.stringify({ model: "errors", messages: msg, max_tokens: "many" })), status: 400, type: "invalid_request_error", param: "max_tokens" },
  // Its type only: a temperature's range is the server's to judge.
  { name: "temperature of the wrong type", send: () => post(JSON.stringify({ model: "errors", messages: msg, temperature: "hot" })), status: 400, type: "invalid_request_error", param: "temperature" },
  { name: "too many messages", send: () => post(JSON.stringify({ model: "errors", messages: Array.from({ length: TEST_LIMITS.maxMessages + 1 }, () => msg[0]) })), status: 400, type: "invalid_request_error", param: "messages" },
  { name: "an unknown model", send: () => post(JSON.stringify({ model: "gpt-9", messages: msg })), status: 404, type: "not_found_error", message: /gpt-9/ },
  // A name is echoed back, but never more of it than a group's name could be.
  { name: "an unknown model with a very long name", send: () => post(JSON.stringify({ model: "m".repeat(40_000), messages: msg })), status: 404, type: "not_found_error", message: /^The model "m{256}…" \(40000 characters\) does not exist or you do not have access to it/ },
  { name: "a body over the limit", send: () => post(JSON.stringify({ model: "errors", messages: [{ role: "user", content: "x".repeat(TEST_LIMITS.maxBodyBytes) }] })), status: 413, type: "invalid_request_error" },
  { name: "a missing key", send: () => post(JSON.stringify({ model: "errors", messages: msg }), {}, false), status: 401, type: "authentication_error" },
  { name: "a wrong key", send: () => post(JSON.stringify({ model: "errors", messages: msg }), { authorization: "Bearer sk-wrong" }), status: 401, type: "authentication_error" },
  { name: "a key in the wrong scheme", send: () => post(JSON.stringify({ model: "errors", messages: msg }), { authorization: `Basic ${env.KVGATE_MASTER_KEY}` }), status: 401, type: "authentication_error" },
  { name: "an upstream 500", send: () => chat("errors", msg, { kvgate_sim: { fail_status: 500 } }), status: 502, type: "upstream_error" },
  { name: "an unreachable upstream", send: () => chat("dead", msg), status: 502, type: "upstream_error", message: /could not be reached/ },
  // A non-streamed answer comes when its generation ends: nonStreamTimeoutMs bounds it.
  { name: "an upstream that does not finish a non-streamed answer in time", send: () => chat("errors", msg, { kvgate_sim: { first_byte_delay_ms: 2000 } }), status: 504, type: "timeout_error", message: /did not finish a non-streamed answer within 300 ms/ },
  // A stream's headers come with its first token: firstByteTimeoutMs bounds them.
  { name: "a streamed request's upstream that sends no headers in time", send: () => chat("errors", msg, { stream: true, kvgate_sim: { first_byte_delay_ms: 2000 } }), status: 504, type: "timeout_error", message: /no response headers within 300 ms/ },
  // The upstream's own type is kept (the simulator answers as vLLM does).
  { name: "an upstream 400 (the client's mistake, passed on)", send: () => chat("errors", msg, { kvgate_sim: { fail_status: 400 } }), status: 400, type: "BadRequestError" },
  { name: "an unknown path", send: () => gateway("/v1/audio/speech", { method: "POST", body: "{}" }), status: 404, type: "not_found_error" },
  { name: "the wrong method", send: () => gateway("/v1/chat/completions", { method: "GET" }), status: 405, type: "invalid_request_error", headers: { allow: "POST" } },
  { name: "the wrong method on completions", send: () => gateway("/v1/completions", { method: "PUT", body: "{}" }), status: 405, type: "invalid_request_error", headers: { allow: "POST" } },
  { name: "the wrong method on models", send: () => gateway("/v1/models", { method: "POST", body: "{}" }), status: 405, type: "invalid_request_error", headers: { allow: "GET, HEAD" } },
  { name: "the wrong method on a model", send: () => gateway("/v1/models/errors", { method: "DELETE" }), status: 405, type: "invalid_request_error", headers: { allow: "GET, HEAD" } },
  { name: "the wrong method on the gateway's status", send: () => gateway("/v1/kvgate/status", { method: "POST", body: "{}" }), status: 405, type: "invalid_request_error", headers: { allow: "GET, HEAD" } },
  { name: "the wrong method on /health", send: () => gateway("/health", { method: "POST", body: "{}" }, false), status: 405, type: "invalid_request_error", headers: { allow: "GET, HEAD" } },
];

describe("bad input gets an OpenAI-style error with the right status", () => {
  it.each(cases)("$name → $status", async (c) => {
    const res = await c.send();
    expect(res.status).toBe(c.status);
    expect(res.headers.get("content-type")).toContain("application/json");
    expect(res.headers.get("x-request-id")).toBeTruthy();
    const body = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
    expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
    expect(body.error.type).toBe(c.type);
    if (c.param !== undefined) expect(body.error.param).toBe(c.param);
    if (c.message) expect(body.error.message).toMatch(c.message);
    for (const [name, value] of Object.entries(c.headers ?? {})) expect(res.headers.get(name)).toBe(value);
    expect(body.error.message).not.toContain(env.KVGATE_MASTER_KEY);
    expect(body.error.message).not.toMatch(/\bat .*\.(ts|js):\d+/);
  });

  it("no healthy backend → 503 with Retry-After, and the held slot is released after", async () => {
    // Held long enough upstream that it still holds the one slot when the second request is routed.
    const held = chat("one-slot", conversation("hold"), { kvgate_sim: { first_byte_delay_ms: 3000 } });
    // Once it holds the slot (a fixed sleep let the second request take it first on a loaded machine).
    await vi.waitFor(async () => expect(await inFlight("one-slot")).toBe(1), EVENTUALLY);
    const res = await chat("one-slot", msg);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe("service_unavailable");
    expect((await held).status).toBe(200);
    await (await held).text();
    await expectIdle("one-slot");
  }, 30_000);

  it("leaves no lease behind after any of these", async () => {
    for (const g of ["errors", "dead"]) await expectIdle(g);
  });
});

describe("edge endpoints", () => {
  it("GET /health needs no key", async () => {
    const res = await gateway("/health", {}, false);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("GET /v1/models lists every group name and alias", async () => {
    const res = await gateway("/v1/models");
    const body = (await res.json()) as { object: string; data: { id: string; object: string }[] };
    expect(body.object).toBe("list");
    const ids = body.data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(["routing", "routing-alias", "streaming", "sdk"]));
    expect(body.data.every((m) => m.object === "model")).toBe(true);
  });

  it("the gateway's own answers carry the request's id, as proxied ones and errors do: the client's when it sent one, else a new one", async () => {
    const sent = { headers: { "x-request-id": "order-42" } };
    for (const [path, auth] of [["/health", false], ["/v1/models", true], ["/v1/models/routing", true], ["/v1/kvgate/status", true]] as const) {
      const res = await gateway(path, sent, auth);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("x-request-id"), path).toBe("order-42");
      await res.body?.cancel();
      const own = await gateway(path, {}, auth);
      expect(own.headers.get("x-request-id"), path).toMatch(/^[0-9a-f-]{36}$/);
      await own.body?.cancel();
    }
    const listed = await gateway("/admin/v1/groups", { headers: { ...sent.headers, authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` } });
    expect(listed.status).toBe(200);
    expect(listed.headers.get("x-request-id")).toBe("order-42");
    await listed.body?.cancel();
  });

  it("answers a CORS preflight from an allowed origin and exposes the routing headers", async () => {
    const res = await gateway("/v1/chat/completions", {
      method: "OPTIONS",
      headers: { origin: "https://app.example", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type, x-stainless-os" },
    }, false);
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("https://app.example");
    expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("authorization");
    const real = await chat("errors", msg, {}, { headers: { origin: "https://app.example" } });
    await real.text();
    expect(real.headers.get("access-control-expose-headers")).toContain("x-kvgate-backend");
    expect(real.headers.get("access-control-expose-headers")).toContain("x-kvgate-attempts");
  });

  it("does not grant CORS to other origins", async () => {
    const res = await gateway("/v1/models", { headers: { origin: "https://evil.example" } });
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
  });
});
