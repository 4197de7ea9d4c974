import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import type { RequestLine } from "../../src/logging/request-log.ts";
import { closedPort } from "../support/closed-port.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startSwitchableUpstream, type SwitchableUpstream } from "../support/switchable-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * The gateway's log lines as Workers Logs receives them: the bundled gateway in workerd on a real
 * socket, the simulated fleet (and a port nobody listens on) as the GPUs; `logs` holds what workerd
 * printed. Each request leaves one JSON line once it has ended, failovers, breakers and registry
 * changes leave event lines, and the config's sampling rate and level decide what is written.
 */

let fleet: Fleet;
let flaky: SwitchableUpstream;
let hostile: HostileUpstream;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
/** Every key string this file used: none may appear in a log line. */
const secrets: string[] = [adminKey];
/** Text of prompts sent here: none may appear in a log line. */
const PROMPT = `tell me about the quartz-zebra-${randomBytes(6).toString("hex")}`;

const sim = (i: number) => ({ id: `sim-${i}`, baseUrl: fleet.urls[i] as string, model: "sim-7b" });

beforeAll(async () => {
  fleet = await startFleet({ workers: 4, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  const dead = `http://127.0.0.1:${await closedPort()}`;
  flaky = await startSwitchableUpstream("sim-7b");
  hostile = await startHostileUpstream();
  gw = await startTestGateway(
    {
      // CORS on, as a browser-facing gateway has it: what a line says must not depend on it.
      cors: { allowedOrigins: ["https://app.example"] },
      modelGroups: [
        { name: "m", deployments: [sim(0), sim(1)] },
        // Round-robin sends each request to the dead server first, until its breaker opens (after 2 failures).
        { name: "m-failover", strategy: "round-robin", breaker: { consecutiveFailures: 2, openMs: 600_000 }, deployments: [{ id: "dead", baseUrl: dead, model: "sim-7b" }, sim(2)] },
        // One backend, on a port nobody listens on: a failed attempt has nowhere to fail over to.
        { name: "m-alone", deployments: [{ id: "dead-alone", baseUrl: dead, model: "sim-7b" }] },
        // No health probes: the breaker leaves "open" only when its cool-down ends inside a route call.
        {
          name: "m-recover",
          strategy: "round-robin",
          breaker: { consecutiveFailures: 1, openMs: 200, probeIntervalMs: 600_000, closeAfterSuccesses: 1 },
          deployments: [{ id: "flaky", baseUrl: flaky.url, model: "sim-7b" }, sim(3)],
        },
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey },
  );
  secrets.push(gw.key);
}, 180_000);
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  await flaky?.close();
  await hostile?.close();
});

type Line = Record<string, unknown>;

/** The JSON lines of `type` a gateway wrote. */
function lines(g: TestGateway, type: "request" | "event"): Line[] {
  const out: Line[] = [];
  for (const l of g.logs) {
    const at = l.indexOf(`{"type":"${type}"`);
    if (at >= 0) out.push(JSON.parse(l.slice(at)) as Line);
  }
  return out;
}

const requestLines = (g: TestGateway, id: string) => lines(g, "request").filter((l) => l.request_id === id);
const events = (g: TestGateway, name: string) => lines(g, "event").filter((l) => l.event === name);

/** The one request line of request `id`, once written. */
async function lineOf(g: TestGateway, id: string): Promise<RequestLine> {
  await vi.waitFor(() => expect(requestLines(g, id).length).toBeGreaterThan(0), EVENTUALLY);
  // Written once: nothing more comes a moment later.
  await new Promise((r) => setTimeout(r, 100));
  const found = requestLines(g, id);
  expect(found).toHaveLength(1);
  return found[0] as unknown as RequestLine;
}

async function admin(g: TestGateway, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${g.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
}

async function createKey(body: Record<string, unknown>): Promise<{ id: string; key: string }> {
  const res = await admin(gw, "POST", "/keys", body);
  expect(res.status).toBe(201);
  const view = (await res.json()) as { id: string; key: string };
  secrets.push(view.key);
  return view;
}

interface Usage { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }

/** One chat request, its body read to the end: the response, its text, and the usage the client saw. */
async function chat(g: TestGateway, key: string, model: string, stream: boolean): Promise<{ res: Response; text: string; usage: Usage | null }> {
  const body: Record<string, unknown> = { model, stream, max_tokens: 8, messages: [{ role: "system", content: "You answer in one line." }, { role: "user", content: PROMPT }] };
  if (stream) body.stream_options = { include_usage: true };
  const res = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await res.text();
  let usage: Usage | null = null;
  if (res.status === 200 && stream) {
    for (const ev of text.split("\n\n")) {
      const data = ev.replace(/^data: /, "").trim();
      if (data.startsWith("{") && data.includes('"usage"')) usage = (JSON.parse(data) as { usage: Usage | null }).usage ?? usage;
    }
  } else if (res.status === 200) {
    usage = (JSON.parse(text) as { usage: Usage }).usage;
  }
  return { res, text, usage };
}

/**
 * The line's routing: the master key's answer says it in its headers, and the line says the same.
 * A virtual key's says none of it (other tenants' prompts decide it): the line keeps it all the same.
 */
function expectRouting(line: RequestLine, res: Response, owner = false): void {
  expect(line).toMatchObject({
    type: "request",
    request_id: res.headers.get("x-request-id"),
    method: "POST",
    path: "/v1/chat/completions",
    model: "m",
    attempts: Number(res.headers.get("x-kvgate-attempts")),
    status: res.status,
  });
  if (owner) {
    const [matched, total] = (res.headers.get("x-kvgate-prefix-blocks") as string).split("/").map(Number);
    expect(line).toMatchObject({ backend: res.headers.get("x-kvgate-backend"), reason: res.headers.get("x-kvgate-reason"), matched_blocks: matched, total_blocks: total });
  } else {
    expect(["x-kvgate-backend", "x-kvgate-reason", "x-kvgate-prefix-blocks"].map((h) => res.headers.get(h))).toEqual([null, null, null]);
    expect(["sim-0", "sim-1"]).toContain(line.backend);
    expect(typeof line.reason).toBe("string");
    expect(line.matched_blocks).toBeGreaterThanOrEqual(0);
    expect(line.total_blocks).toBeGreaterThanOrEqual(line.matched_blocks as number);
  }
  expect(Number.isNaN(Date.parse(line.time))).toBe(false);
}

describe("one JSON line per request", () => {
  it("a streamed request: one info line, when its body ended, with its routing (a virtual key's answer not telling it) and the usage the client saw", async () => {
    const { id, key } = await createKey({ track_usage: true });
    const { res, usage } = await chat(gw, key, "m", true);
    expect(res.status).toBe(200);
    expect(usage).not.toBeNull();
    const line = await lineOf(gw, res.headers.get("x-request-id") as string);
    expectRouting(line, res);
    expect(line).toMatchObject({ level: "info", key_id: id, group: "m", stream: true, error_code: null });
    expect(line.prompt_tokens).toBe(usage?.prompt_tokens);
    expect(line.completion_tokens).toBe(usage?.completion_tokens);
    expect(line.cached_tokens).toBe(usage?.prompt_tokens_details?.cached_tokens ?? 0);
    expect(typeof line.ttft_ms).toBe("number");
    expect(typeof line.duration_ms).toBe("number");
    expect(line.duration_ms).toBeGreaterThanOrEqual(line.ttft_ms as number);
  });

  it("a non-streamed request: one info line with its tokens, and one with the master key's", async () => {
    const { id, key } = await createKey({ track_usage: true });
    const { res, usage } = await chat(gw, key, "m", false);
    expect(res.status).toBe(200);
    const line = await lineOf(gw, res.headers.get("x-request-id") as string);
    expectRouting(line, res);
    expect(line).toMatchObject({ level: "info", key_id: id, stream: false, error_code: null, prompt_tokens: usage?.prompt_tokens, completion_tokens: usage?.completion_tokens });
    expect(typeof line.ttft_ms).toBe("number");
    expect(typeof line.duration_ms).toBe("number");

    const master = await chat(gw, gw.key, "m", false);
    const masterLine = await lineOf(gw, master.res.headers.get("x-request-id") as string);
    expectRouting(masterLine, master.res, true);
    expect(masterLine.key_id).toBe("master");
  });

  it("a failover leaves a failover event and a line with 2 attempts; the breaker opening leaves a breaker event", async () => {
    const first = await chat(gw, gw.key, "m-failover", false);
    expect(first.res.status).toBe(200);
    const id = first.res.headers.get("x-request-id") as string;
    const line = await lineOf(gw, id);
    expect(line).toMatchObject({ attempts: 2, reason: "failover", group: "m-failover", backend: "sim-2", status: 200 });
    expect(events(gw, "failover").filter((e) => e.request_id === id)).toEqual([
      expect.objectContaining({ type: "event", level: "warn", group: "m-failover", backend: "dead", cause: "connect", next_attempt: 2 }),
    ]);

    expect(events(gw, "breaker").filter((e) => e.backend === "dead")).toEqual([]);
    expect((await chat(gw, gw.key, "m-failover", false)).res.status).toBe(200);
    await vi.waitFor(() => expect(events(gw, "breaker").filter((e) => e.group === "m-failover")).toEqual([expect.objectContaining({ level: "warn", group: "m-failover", backend: "dead", from: "closed", to: "open" })]), EVENTUALLY);
  });

  it("a failed attempt with no backend left to try leaves no failover event: the request's line says 1 attempt", async () => {
    const alone = await chat(gw, gw.key, "m-alone", false);
    expect(alone.res.status).toBe(502);
    expect(alone.res.headers.get("x-kvgate-attempts")).toBe("1");
    const id = alone.res.headers.get("x-request-id") as string;
    expect(await lineOf(gw, id)).toMatchObject({ attempts: 1, backend: "dead-alone", status: 502 });
    expect(events(gw, "failover").filter((e) => e.request_id === id)).toEqual([]);
  });

  it("a breaker's whole round leaves one event per transition: open, half-open when its cool-down ends, closed after a good trial", async () => {
    const round = () => events(gw, "breaker").filter((e) => e.group === "m-recover");
    await fetch(`${flaky.url}/__mode`, { method: "POST", body: JSON.stringify({ mode: "fail" }) });
    // Until a request fails over from flaky: that one failure opened its breaker.
    await vi.waitFor(async () => {
      const { res } = await chat(gw, gw.key, "m-recover", false);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-kvgate-attempts")).toBe("2");
    }, EVENTUALLY);
    // Well again before any request can make the trial that ends the cool-down: however late the
    // open's line comes, the trial finds flaky well (chats sent while waiting for that line made
    // trials against a failing flaky once its 200 ms were up, and opened it again).
    await fetch(`${flaky.url}/__mode`, { method: "POST", body: JSON.stringify({ mode: "ok" }) });
    await vi.waitFor(() => expect(round()).toHaveLength(1), EVENTUALLY);
    await vi.waitFor(async () => {
      expect((await chat(gw, gw.key, "m-recover", false)).res.status).toBe(200);
      expect(round()).toHaveLength(3);
    }, EVENTUALLY);
    expect(round().map((e) => [e.from, e.to, e.level])).toEqual([
      ["closed", "open", "warn"],
      ["open", "half-open", "info"],
      ["half-open", "closed", "info"],
    ]);
  });

  it("a 401 and a 429 leave warn lines with their error codes", async () => {
    const bad = await chat(gw, `sk-wrong-${randomBytes(8).toString("hex")}`, "m", false);
    expect(bad.res.status).toBe(401);
    expect(await lineOf(gw, bad.res.headers.get("x-request-id") as string)).toMatchObject({ level: "warn", status: 401, key_id: null, error_code: "invalid_api_key", backend: null });

    const { id, key } = await createKey({ rpm: 1 });
    expect((await chat(gw, key, "m", false)).res.status).toBe(200);
    const limited = await chat(gw, key, "m", false);
    expect(limited.res.status).toBe(429);
    expect(await lineOf(gw, limited.res.headers.get("x-request-id") as string)).toMatchObject({ level: "warn", status: 429, key_id: id, model: "m", error_code: "rate_limit_exceeded" });
  });

  it("a browser app's key used from another page, or from no page, is refused 403 and its line names the key", async () => {
    const { id, key } = await createKey({ origins: ["https://keys-page.example"] });
    for (const origin of ["https://evil.example", undefined]) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...(origin === undefined ? {} : { origin }) },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: PROMPT }] }),
      });
      expect(res.status).toBe(403);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("origin_not_allowed");
      expect(await lineOf(gw, res.headers.get("x-request-id") as string)).toMatchObject({ level: "warn", status: 403, key_id: id, error_code: "origin_not_allowed" });
    }
  });

  it("a model name no group can have (over 256 characters) is logged cut, as its 404 quotes it", async () => {
    const name = `m${"x".repeat(1024 * 1024)}`;
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body: JSON.stringify({ model: name, messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(404);
    const line = await lineOf(gw, res.headers.get("x-request-id") as string);
    expect(line).toMatchObject({ status: 404, error_code: "model_not_found" });
    expect(line.model).toBe(`${name.slice(0, 256)}…`);
  });

  it("vLLM's paths outside /v1 (/rerank, /v2/rerank, /score) leave their lines as /v1's do, a wrong key's too", async () => {
    for (const path of ["/rerank", "/v2/rerank", "/score"]) {
      const body = path === "/score" ? { model: "m", text_1: "a question", text_2: ["one answer", "another"] } : { model: "m", query: "a question", documents: ["one answer", "another"] };
      const served = await fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
      expect(served.status, await served.text()).toBe(200);
      expect(await lineOf(gw, served.headers.get("x-request-id") as string)).toMatchObject({ level: "info", method: "POST", path, status: 200, key_id: "master", model: "m", group: "m", error_code: null });
      const refused = await fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: "Bearer sk-wrong", "content-type": "application/json" }, body: JSON.stringify(body) });
      expect(refused.status).toBe(401);
      expect(await lineOf(gw, refused.headers.get("x-request-id") as string)).toMatchObject({ level: "warn", path, status: 401, key_id: null, error_code: "invalid_api_key" });
    }
  });

  it("a registry change through the admin API leaves a registry event", async () => {
    const res = await admin(gw, "POST", "/groups", { name: "added-later", deployments: [sim(3)] });
    expect(res.status).toBe(201);
    const { rev } = (await res.json()) as { rev: number };
    await vi.waitFor(() => expect(events(gw, "registry")).toContainEqual(expect.objectContaining({ level: "info", op: "add-group", rev, changed: ["added-later"], removed: [] })), EVENTUALLY);
  });

  it("a virtual key pasted where the model, the path or the request id goes is never logged whole", async () => {
    const { key } = await createKey({});
    const auth = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const masked = `${key.slice(0, 12)}…`;
    const asModel = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: auth, body: JSON.stringify({ model: key, messages: [{ role: "user", content: "hi" }] }) });
    expect(asModel.status).toBe(404);
    expect(await lineOf(gw, asModel.headers.get("x-request-id") as string)).toMatchObject({ status: 404, model: masked });
    for (const path of [`/v1/models/${key}`, `/v1/${key}/chat/completions`]) {
      const res = await fetch(`${gw.url}${path}`, { headers: auth });
      expect(res.status).toBe(404);
      expect(await lineOf(gw, res.headers.get("x-request-id") as string)).toMatchObject({ status: 404, path: path.replace(key, masked) });
    }
    // Sent as its request id: the request gets an id of the gateway's, which its line and the engine carry.
    const asId = await fetch(`${gw.url}/v1/models`, { headers: { ...auth, "x-request-id": key } });
    expect(asId.status).toBe(200);
    const id = asId.headers.get("x-request-id") as string;
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(await lineOf(gw, id)).toMatchObject({ status: 200, request_id: id });
  });

  it("no line holds a key or the prompt's text", () => {
    expect(gw.logs.length).toBeGreaterThan(0);
    for (const l of gw.logs) {
      for (const s of [...secrets, PROMPT]) expect(l).not.toContain(s);
    }
  });
});

describe("an answer given before the gateway's app", () => {
  it("a deploy whose modelGroups lack a secret: each client request's 500 leaves its error line, which names no caller", async () => {
    // The deploy's seed names a secret this Worker lacks: the registry refuses it, and every client request gets the 500 naming it.
    const lacking = { name: "m-lacking", deployments: [{ baseUrl: "https://gpu.example", model: "sim-7b", headersFromEnv: { "CF-Access-Client-Secret": "NOT_SET_ACCESS_SECRET" } }] };
    const g = await startTestGateway({ modelGroups: [lacking] }, { KVGATE_ADMIN_KEY: adminKey });
    secrets.push(g.key);
    try {
      for (const path of ["/v1/chat/completions", "/rerank"]) {
        const res = await fetch(`${g.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${g.key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "m-lacking", messages: [{ role: "user", content: PROMPT }] }) });
        expect(res.status).toBe(500);
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe("config_invalid");
        expect(await lineOf(g, res.headers.get("x-request-id") as string)).toMatchObject({ type: "request", level: "error", key_id: null, method: "POST", path, status: 500, error_code: "config_invalid" });
      }
    } finally {
      await g.close();
    }
  }, 120_000);
});

describe("the config's sampling rate and level", () => {
  const broken = (name: string, behaviour: string, more: { streamIdleTimeoutMs?: number } = {}) => ({ name, failover: { maxAttempts: 1 }, ...more, deployments: [{ id: behaviour, baseUrl: `${hostile.url}/${behaviour}`, model: "sim-7b" }] });

  async function gatewayWith(logging: { sampleRate?: number; level?: "debug" | "info" | "warn" | "error" }): Promise<TestGateway> {
    const modelGroups = [
      { name: "m", deployments: [sim(0)] },
      // Streams that fail after their 200 headers went out: the engine breaks off, stalls, or the client leaves.
      broken("m-cut", "cut-between-events"),
      broken("m-stalled", "silent-stream", { streamIdleTimeoutMs: 300 }),
      broken("m-endless", "endless-stream"),
    ];
    const g = await startTestGateway({ logging: { requests: logging }, modelGroups }, { KVGATE_ADMIN_KEY: adminKey });
    secrets.push(g.key);
    return g;
  }

  it("sampleRate 0: no request line", async () => {
    const g = await gatewayWith({ sampleRate: 0 });
    try {
      const ok = await chat(g, g.key, "m", true);
      const bad = await chat(g, "sk-nope", "m", false);
      expect([ok.res.status, bad.res.status]).toEqual([200, 401]);
      // An event written after both answers: by then their lines would have been written.
      expect((await admin(g, "POST", "/groups", { name: "barrier", deployments: [sim(1)] })).status).toBe(201);
      await vi.waitFor(() => expect(events(g, "registry")).toContainEqual(expect.objectContaining({ op: "add-group", changed: ["barrier"] })), EVENTUALLY);
      expect(lines(g, "request")).toEqual([]);
    } finally {
      await g.close();
    }
  }, 120_000);

  it('level "warn": the info lines are dropped, the warn lines written', async () => {
    const g = await gatewayWith({ level: "warn" });
    try {
      const ok = await chat(g, g.key, "m", false);
      expect(ok.res.status).toBe(200);
      const bad = await chat(g, "sk-nope", "m", false);
      expect(await lineOf(g, bad.res.headers.get("x-request-id") as string)).toMatchObject({ level: "warn", status: 401 });
      expect(requestLines(g, ok.res.headers.get("x-request-id") as string)).toEqual([]);
      expect(lines(g, "request").every((l) => l.level !== "info")).toBe(true);
    } finally {
      await g.close();
    }
  }, 120_000);

  it('level "warn": a stream that fails after its 200 headers is a failure, and its line is written', async () => {
    const g = await gatewayWith({ level: "warn" });
    try {
      // The engine breaks off after one event, and stalls after one: the 502 and 504 they would have been before the headers.
      for (const [model, code] of [["m-cut", "upstream_stream_error"], ["m-stalled", "upstream_stream_stalled"]] as const) {
        const { res, text } = await chat(g, g.key, model, true);
        expect(res.status).toBe(200);
        expect(text).toContain(`"code":"${code}"`);
        expect(await lineOf(g, res.headers.get("x-request-id") as string)).toMatchObject({ level: "error", status: 200, stream: true, error_code: code });
      }
      // The client leaves mid-stream: the 499 it would have been.
      const abort = new AbortController();
      const res = await fetch(`${g.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${g.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "m-endless", stream: true, messages: [{ role: "user", content: PROMPT }] }),
        signal: abort.signal,
      });
      expect(res.status).toBe(200);
      await (res.body as ReadableStream<Uint8Array>).getReader().read();
      abort.abort();
      expect(await lineOf(g, res.headers.get("x-request-id") as string)).toMatchObject({ level: "warn", status: 200, stream: true, error_code: "client_closed_request" });
    } finally {
      await g.close();
    }
  }, 120_000);
});
