import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, expect, it, vi } from "vitest";
import worker from "../../workers/gateway/index.ts";
import type { Env } from "../../workers/env.ts";

/**
 * The request line (README → Logs: "each client request ... leaves one JSON line") of a request
 * an isolate answers with a 503 `routing_unavailable` because its first read of the fleet
 * registry failed: what every new isolate of a deploy answers while the registry is reset or
 * overloaded, and what an alert on the lines' errors must see. The registry is a stand-in whose
 * every call fails, as in registry-outage.test.ts; every call here gets it, so this file's isolate
 * never holds a fleet and each call is an isolate's first.
 */

const overloaded = async () => Promise.reject(Object.assign(new Error("Durable Object is overloaded. Too many requests queued."), { overloaded: true }));
const down = { getByName: () => ({ records: overloaded, record: overloaded, command: overloaded, snapshot: overloaded }) };
const config = JSON.parse(env.KVGATE_CONFIG) as Record<string, unknown>;

afterEach(() => {
  vi.restoreAllMocks();
});

/** What the Worker wrote as request lines while `path` was called with the registry down, and its answer. */
async function linesOf(path: string, init: RequestInit, gatewayConfig: Record<string, unknown> = config): Promise<{ res: Response; lines: Record<string, unknown>[] }> {
  vi.spyOn(console, "error").mockImplementation(() => undefined);
  const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
  log.mockClear();
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`https://kvgate.test${path}`, init), { ...env, KVGATE_CONFIG: JSON.stringify(gatewayConfig), FLEET: down } as unknown as Env, ctx);
  // The line is written once the answer went: under waitUntil.
  await waitOnExecutionContext(ctx);
  const lines = log.mock.calls.map((c) => String(c[0])).filter((l) => l.startsWith('{"type":"request"')).map((l) => JSON.parse(l) as Record<string, unknown>);
  return { res, lines };
}

const chat = (requestId: string): RequestInit => ({
  method: "POST",
  headers: { authorization: `Bearer ${env.KVGATE_MASTER_KEY}`, "content-type": "application/json", "x-request-id": requestId },
  body: JSON.stringify({ model: "routing", messages: [{ role: "user", content: "hello" }] }),
});

it("a client request's 503 leaves its error line, vLLM's paths outside /v1 too; the caller, never authenticated, is null", async () => {
  for (const path of ["/v1/chat/completions", "/score"]) {
    const { res, lines } = await linesOf(path, chat(`req-registry-down${path.replaceAll("/", "-")}`));
    expect(res.status).toBe(503);
    expect(lines).toEqual([
      expect.objectContaining({ type: "request", level: "error", request_id: res.headers.get("x-request-id"), key_id: null, method: "POST", path, status: 503, error_code: "routing_unavailable", model: null, backend: null }),
    ]);
    expect(typeof lines[0]?.duration_ms).toBe("number");
  }
});

it("as the config's logging.requests says: none at sampleRate 0; and none for the operator's paths, as the app writes none", async () => {
  const unsampled = await linesOf("/v1/chat/completions", chat("req-unsampled"), { ...config, logging: { requests: { sampleRate: 0 } } });
  expect([unsampled.res.status, unsampled.lines]).toEqual([503, []]);
  const health = await linesOf("/health", {});
  expect([health.res.status, health.lines]).toEqual([503, []]);
});

it("a preflight no one grants leaves no line where the app would write none: a config with a CORS list answers every preflight before its logger (review s62 diff1)", async () => {
  const preflight = (origin: string): RequestInit => ({ method: "OPTIONS", headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" } });
  // The test config lists https://app.example.
  const stranger = await linesOf("/v1/chat/completions", preflight("https://stranger.example"));
  expect([stranger.res.status, stranger.lines]).toEqual([503, []]);
  // Without a list the app lets a preflight reach its /v1 logger (and answers its 401): so does this answer.
  const unlisted = await linesOf("/v1/chat/completions", preflight("https://stranger.example"), { ...config, cors: { allowedOrigins: [] } });
  expect([unlisted.res.status, unlisted.lines.map((l) => [l.method, l.status])]).toEqual([503, [["OPTIONS", 503]]]);
});

it("a client request a Worker without a config it can read answers (500 config_invalid) leaves its line, at the logging defaults a config without `logging` has (review s62 diff1)", async () => {
  for (const [what, raw] of [["unset", ""], ["not-json", "{"]] as const) {
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    log.mockClear();
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request("https://kvgate.test/v1/chat/completions", chat(`req-config-${what}`)), { ...env, KVGATE_CONFIG: raw } as unknown as Env, ctx);
    await waitOnExecutionContext(ctx);
    const lines = log.mock.calls.map((c) => String(c[0])).filter((l) => l.startsWith('{"type":"request"')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect([what, res.status, lines]).toEqual([what, 500, [expect.objectContaining({ level: "error", request_id: `req-config-${what}`, key_id: null, status: 500, error_code: "config_invalid" })]]);
  }
});
