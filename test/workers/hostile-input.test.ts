import { env } from "cloudflare:workers";
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { BODY_SHAPE } from "../../src/openai/body-shape.ts";
import {
  authorization,
  bodyOfSize,
  chunking,
  contentType,
  HOSTILE_MODELS,
  hugeValid,
  junkHeaders,
  malformed,
  method,
  nested,
  origin,
  padChar,
  PASSED_THROUGH_ROUTES,
  path,
  PREFIX_CAP,
  REQUEST_ID,
  requestId,
  streamOf,
  unknownModel,
  utf8,
  validChat,
  validCompletion,
  wrongShape,
  type BodyCase,
} from "../support/hostile-requests.ts";
import { referenceShapeExcess } from "../support/json-shape-reference.ts";
import { TEST_LIMITS, UPSTREAM_MODEL } from "../support/test-config.ts";
import { DISCARD_BYTES } from "../../workers/gateway/body.ts";
import { EVENTUALLY, gateway, status } from "./gateway.ts";

/**
 * Property tests: generated hostile requests sent to the gateway Worker in the Workers runtime,
 * against the simulated fleet. Every answer is a 4xx OpenAI-style error with the status the input
 * calls for, or a 200 when the input happens to be valid; never a 5xx; and afterwards no lease is
 * left in the model groups' Durable Objects.
 *
 * Each property run sends a batch of requests at once (the gateway serves concurrent requests, and
 * it keeps the file's runtime down); a failure names the request that failed.
 */

const LIMIT = TEST_LIMITS.maxBodyBytes;
/** Nesting levels the gateway accepts (src/openai/body-shape.ts): not configurable. */
const MAX_DEPTH = BODY_SHAPE.maxDepth;
const KEY = env.KVGATE_MASTER_KEY;
const BATCH = 8;
const CHAT = "/v1/chat/completions";
const COMPLETIONS = "/v1/completions";
const PATH_OF = { chat: CHAT, completions: COMPLETIONS } as const;

// ---------------------------------------------------------------------------------------------
// Sending

interface Sent {
  label: string;
  method: string;
  path: string;
  headers: [string, string][];
  body: Uint8Array | null;
  /** Send the body as a stream of these chunk sizes, without a content-length. */
  chunks?: number[] | undefined;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

let sent = 0;

async function exchange(s: Sent): Promise<Answer> {
  const headers = new Headers();
  for (const [k, v] of s.headers) headers.append(k, v);
  const body = s.body === null ? null : s.chunks ? streamOf(s.body, s.chunks) : s.body;
  sent++;
  const res = await gateway(s.path, { method: s.method, headers, body }, false);
  // Read every answer to its end: a stream's lease is released when its body ends.
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const authed = (): [string, string] => ["authorization", `Bearer ${KEY}`];
const jsonType: [string, string] = ["content-type", "application/json"];

// ---------------------------------------------------------------------------------------------
// Judging

type Endpoint = "chat" | "completions";

type Expectation =
  /** An error: this status, and where given, this code, param and message. */
  | { kind: "error"; status: number; type?: string; code?: string; param?: string | null; present?: boolean; message?: RegExp }
  /** A body that parsed to an object: judged against what it holds. `valid`: it must succeed. */
  | { kind: "parsed"; value: Record<string, unknown>; endpoint: Endpoint; valid: boolean }
  /** A 2xx JSON answer of a GET route. */
  | { kind: "get"; route: "/health" | "/v1/models" | "/v1/kvgate/status" }
  /** A status and no body (HEAD, CORS preflight). */
  | { kind: "empty"; status: number }
  /** A path whose routing this file does not predict: any 4xx, or a 200 only where a key allows it. */
  | { kind: "loose"; authed: boolean };

// As the gateway decodes: invalid UTF-8 is an error, a leading byte-order mark is dropped.
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
const tooLarge: Expectation = { kind: "error", status: 413, code: "body_too_large" };

/** What a completion endpoint must answer for these bytes, as far as the bytes alone decide. */
function forBytes(bytes: Uint8Array, endpoint: Endpoint, valid = false): Expectation {
  if (bytes.length > LIMIT) return tooLarge;
  let text: string;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    return { kind: "error", status: 400, code: "invalid_json", message: /UTF-8/ };
  }
  if (text.trim() === "") return { kind: "error", status: 400, code: "invalid_json", message: /empty/ };
  // The body's shape is judged on its text before it is parsed, so this holds for JSON and for junk alike.
  const shape = referenceShapeExcess(text, BODY_SHAPE);
  if (shape) return { kind: "error", status: 400, code: shape.rule === "depth" ? "json_too_deep" : "json_too_complex", param: shape.field };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: "error", status: 400, code: "invalid_json", message: /not valid JSON/ };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return { kind: "error", status: 400, code: "invalid_request", param: null };
  const record = value as Record<string, unknown>;
  return (endpoint === "chat" ? overCount(record) : null) ?? { kind: "parsed", value: record, endpoint, valid };
}

/**
 * A chat body's configured counts, in the order the gateway checks them (before the schema, so
 * whatever else is wrong with the body): messages, tools, then content parts and tool calls
 * summed over the messages, the error naming the message where the sum passes.
 */
function overCount(body: Record<string, unknown>): Expectation | null {
  const error = (param: string): Expectation => ({ kind: "error", status: 400, code: "invalid_request", param, message: /more than/ });
  const messages = Array.isArray(body.messages) ? (body.messages as unknown[]) : [];
  if (messages.length > TEST_LIMITS.maxMessages) return error("messages");
  if (Array.isArray(body.tools) && body.tools.length > TEST_LIMITS.maxTools) return error("tools");
  for (const [key, limit] of [["content", TEST_LIMITS.maxContentParts], ["tool_calls", TEST_LIMITS.maxToolCalls]] as const) {
    let sum = 0;
    for (const [i, m] of messages.entries()) {
      const items = typeof m === "object" && m !== null && !Array.isArray(m) ? (m as Record<string, unknown>)[key] : undefined;
      if (Array.isArray(items) && (sum += items.length) > limit) return error(`messages[${i}].${key}`);
    }
  }
  return null;
}

const ERROR_TYPES = new Set(["invalid_request_error", "authentication_error", "not_found_error", "rate_limit_error", "server_error", "upstream_error", "timeout_error", "service_unavailable"]);

interface ErrorFields {
  message: string;
  type: string;
  param: string | null;
  code: string | null;
}

/** The error object of an OpenAI-style error body, or a reason it is not one. */
function errorOf(a: Answer): ErrorFields | string {
  if (!a.headers.get("content-type")?.includes("application/json")) return `content-type ${a.headers.get("content-type")}`;
  let body: unknown;
  try {
    body = JSON.parse(a.text);
  } catch {
    return "an error body that is not JSON";
  }
  const e = (body as { error?: unknown } | null)?.error;
  if (typeof e !== "object" || e === null) return "no error object";
  const keys = Object.keys(body as object);
  if (keys.length !== 1) return `top-level keys ${keys.join(",")}`;
  const f = e as Record<string, unknown>;
  if (Object.keys(f).sort().join(",") !== "code,message,param,type") return `error keys ${Object.keys(f).join(",")}`;
  if (typeof f.message !== "string" || f.message === "") return "no message";
  if (typeof f.type !== "string" || !ERROR_TYPES.has(f.type)) return `type ${String(f.type)}`;
  if (f.param !== null && typeof f.param !== "string") return "param neither string nor null";
  if (f.code !== null && typeof f.code !== "string") return "code neither string nor null";
  if (f.message.includes(KEY)) return "the message shows the master key";
  if (/\bat .*\.(ts|js):\d+/.test(f.message)) return "the message holds a stack trace";
  return f as unknown as ErrorFields;
}

/** Why a 200 is not the completion the parsed body asked for, or null. */
function completionProblem(a: Answer, value: Record<string, unknown>, endpoint: Endpoint): string | null {
  const model = value.model;
  if (typeof model !== "string" || !(HOSTILE_MODELS as readonly string[]).includes(model)) return `a 200 for model ${String(model)}`;
  if (!a.headers.get("x-kvgate-backend")) return "no x-kvgate-backend";
  const blocks = /^(\d+)\/(\d+)$/.exec(a.headers.get("x-kvgate-prefix-blocks") ?? "");
  if (!blocks) return `x-kvgate-prefix-blocks ${a.headers.get("x-kvgate-prefix-blocks")}`;
  const [matched, total] = [Number(blocks[1]), Number(blocks[2])];
  if (matched > total || total > (PREFIX_CAP[model] as number)) return `prefix blocks ${matched}/${total} over the group's cap of ${PREFIX_CAP[model]}`;
  if (value.stream === true) {
    if (!a.text.endsWith("data: [DONE]\n\n")) return "a stream that does not end with [DONE]";
    if (a.text.includes('data: {"error"')) return "an error event in the stream";
    return null;
  }
  let body: { object?: unknown; model?: unknown; choices?: unknown };
  try {
    body = JSON.parse(a.text) as typeof body;
  } catch {
    return "a completion that is not JSON";
  }
  const object = endpoint === "chat" ? "chat.completion" : "text_completion";
  if (body.object !== object || body.model !== UPSTREAM_MODEL || !Array.isArray(body.choices) || body.choices.length === 0) return `not a ${object}`;
  return null;
}

/** Why the answer is wrong for the expectation, or null. */
function problem(s: Sent, a: Answer, e: Expectation): string | null {
  if (a.status >= 500) return "a 5xx";
  const bodyless = normalise(s.method) === "HEAD" || a.status === 204;
  // Errors and proxied answers carry one (the README's promise); /health and preflights need not.
  if ((a.status >= 400 || a.headers.has("x-kvgate-backend")) && !a.headers.get("x-request-id")) return "no x-request-id";
  if (bodyless && a.text !== "") return "a body on a HEAD answer or a 204";
  let err: ErrorFields | null = null;
  if (a.status >= 400 && !bodyless) {
    const got = errorOf(a);
    if (typeof got === "string") return `not an OpenAI error: ${got}`;
    err = got;
  }
  switch (e.kind) {
    case "error": {
      if (a.status !== e.status) return `status ${a.status}, expected ${e.status}`;
      if (!err) return null;
      if (e.type !== undefined && err.type !== e.type) return `type ${err.type}, expected ${e.type}`;
      if (e.code !== undefined && err.code !== e.code) return `code ${err.code}, expected ${e.code}`;
      if (e.param !== undefined && err.param !== e.param) return `param ${err.param}, expected ${e.param}`;
      if (e.message && !e.message.test(err.message)) return `message ${JSON.stringify(err.message)} does not match ${e.message}`;
      if (e.present !== undefined) {
        // The message names the field, and says "required" exactly when the field is missing.
        const where = e.param || "body";
        if (!err.message.startsWith(`${where} `)) return `message ${JSON.stringify(err.message)} does not start with ${where}`;
        if (/is required/.test(err.message) === e.present) return `message ${JSON.stringify(err.message)} for a field that is ${e.present ? "there" : "missing"}`;
      }
      return null;
    }
    case "parsed": {
      if (a.status === 200) return completionProblem(a, e.value, e.endpoint);
      if (e.valid) return `status ${a.status} for a valid body`;
      if (a.status === 404) {
        const m = e.value.model;
        if (err?.code !== "model_not_found") return `404 with code ${err?.code}`;
        return typeof m === "string" && !(HOSTILE_MODELS as readonly string[]).includes(m) ? null : `model_not_found for model ${String(m)}`;
      }
      if (a.status === 400) return err?.code === "invalid_request" || err?.code === "upstream_rejected" ? null : `400 with code ${err?.code}`;
      return `status ${a.status}`;
    }
    case "get": {
      if (a.status !== 200) return `status ${a.status}, expected 200`;
      const body = JSON.parse(a.text) as Record<string, unknown>;
      if (e.route === "/health") return body.status === "ok" ? null : "not the health body";
      if (e.route === "/v1/models") return body.object === "list" && Array.isArray(body.data) ? null : "not a model list";
      return Array.isArray(body.groups) ? null : "not a status body";
    }
    case "empty":
      return a.status === e.status ? null : `status ${a.status}, expected ${e.status}`;
    case "loose": {
      if (![200, 204, 400, 401, 404, 405, 413].includes(a.status)) return `status ${a.status}`;
      if (a.status === 204 && normalise(s.method) !== "OPTIONS") return "a 204 that is no preflight";
      // Without a key, only the health check may answer 200: anything else is a way round auth.
      if (a.status === 200 && !e.authed && !bodyless && a.text !== '{"status":"ok"}') return "a 200 without a key";
      return null;
    }
  }
}

const NORMALISED = new Set(["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"]);
/** The fetch spec has Request upper-case these six methods whatever their case. */
const normalise = (m: string) => (NORMALISED.has(m.toUpperCase()) ? m.toUpperCase() : m);

async function check(s: Sent, e: Expectation, extra?: (a: Answer) => string | null): Promise<void> {
  const a = await exchange(s);
  const why = problem(s, a, e) ?? extra?.(a) ?? null;
  if (why) throw new Error(`${s.label}: ${s.method} ${s.path.slice(0, 80)} → ${a.status} ${a.text.slice(0, 300)}: ${why}`);
}

/**
 * Runs a property over batches of generated requests and checks it sent them all: numRuns × BATCH
 * requests per property, which is what the file's total of generated requests is made of.
 */
async function property<T>(arb: fc.Arbitrary<T>, numRuns: number, toCheck: (c: T) => Promise<void>): Promise<void> {
  const before = sent;
  await fc.assert(
    fc.asyncProperty(fc.array(arb, { minLength: BATCH, maxLength: BATCH }), (cases) => all(cases.map(toCheck))),
    { numRuns },
  );
  expect(sent - before).toBe(numRuns * BATCH);
  await expectSettled();
}

/** Sends a batch at once; every answer is read before the first failure is reported. */
async function all(checks: Promise<void>[]): Promise<void> {
  const results = await Promise.allSettled(checks);
  for (const r of results) if (r.status === "rejected") throw r.reason;
}

/**
 * No request left an in-flight count or a lease behind, once the releases have landed; and none
 * counted against a backend: the simulated fleet never fails, so a failure there is the gateway
 * blaming a healthy backend for a client's input (which would open its breaker for everyone).
 */
async function expectSettled(): Promise<void> {
  for (const group of ["hostile", "hostile-prefix"]) {
    await vi.waitFor(
      async () => {
        const s = await status(group);
        const zeros = s.backends.map(() => 0);
        expect(s.backends.map((b) => b.inFlight)).toEqual(zeros);
        expect(s.leases).toBe(0);
        expect(s.backends.map((b) => b.failed)).toEqual(zeros);
      },
      EVENTUALLY,
    );
  }
}

const post = (label: string, endpoint: Endpoint, body: Uint8Array, headers: [string, string][] = [authed(), jsonType]): Sent => ({ label, method: "POST", path: PATH_OF[endpoint], headers, body });

// ---------------------------------------------------------------------------------------------
// Properties

const RUNS = { malformed: 350, wrongShape: 250, valid: 150, sizes: 100, headers: 200, routes: 250 };
const PROPERTY_TIMEOUT = 120_000;

describe("hostile request bodies", () => {
  it(
    "malformed bytes (broken JSON, invalid UTF-8, random bytes) get a 400 invalid_json, or are judged as the JSON they happen to be",
    () =>
      property(fc.tuple(malformed, fc.constantFrom<Endpoint>("chat", "completions")), RUNS.malformed, ([c, endpoint]) =>
        check(post(c.label, endpoint, c.bytes), forBytes(c.bytes, endpoint)),
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    "a field of the wrong type, out of range or missing gets a 400 naming it; an unknown model a 404",
    () => {
      const cases = fc.oneof(
        { weight: 5, arbitrary: wrongShape.map((w): [BodyCase, Expectation] => [w, { kind: "error", status: 400, type: "invalid_request_error", code: "invalid_request", param: w.param, present: w.present }]) },
        { weight: 1, arbitrary: unknownModel.map((c): [BodyCase, Expectation] => [c, { kind: "error", status: 404, type: "not_found_error", code: "model_not_found" }]) },
      );
      return property(cases, RUNS.wrongShape, ([c, e]) => check(post(c.label, c.endpoint, utf8(c.text)), e));
    },
    PROPERTY_TIMEOUT,
  );

  it(
    "valid bodies with odd text, duplicate keys, absurd numbers, deep nesting and huge arrays get a 200, or the 400 of the limit they pass",
    () => {
      const cases = fc.oneof({ weight: 3, arbitrary: validChat }, { weight: 2, arbitrary: validCompletion }, { weight: 1, arbitrary: hugeValid });
      return property(cases, RUNS.valid, (c) => {
        const bytes = utf8(c.text);
        return check(post(c.label, c.endpoint, bytes), forBytes(bytes, c.endpoint, true));
      });
    },
    PROPERTY_TIMEOUT,
  );

  it(
    "bodies around and far over the size limit, whole or streamed in odd chunks, and message counts around the limit",
    () => {
      const size = fc.oneof(fc.integer({ min: LIMIT - 64, max: LIMIT + 64 }), fc.integer({ min: 100, max: 2 * LIMIT }), fc.constantFrom(4 * LIMIT, 16 * LIMIT));
      const sized = fc.record({ size, pad: padChar, model: fc.constantFrom(...HOSTILE_MODELS), chunks: fc.option(chunking, { nil: undefined }) }).map((r): [Sent, Expectation] => {
        const body = bodyOfSize(r.size, r.pad, r.model);
        const label = `${body.length}-byte body padded with ${JSON.stringify(r.pad)}${r.chunks ? ` in chunks of ${r.chunks.join(",")}` : ""}`;
        return [{ ...post(label, "chat", body), chunks: r.chunks }, forBytes(body, "chat", true)];
      });
      // Junk past the limit is refused for its size before anyone reads it as JSON.
      const junk = fc.record({ size: fc.integer({ min: LIMIT + 1, max: 3 * LIMIT }), fill: fc.uint8Array({ minLength: 1, maxLength: 16 }), chunks: fc.option(chunking, { nil: undefined }) }).map((r): [Sent, Expectation] => {
        const body = new Uint8Array(r.size).map((_, i) => r.fill[i % r.fill.length] as number);
        return [{ ...post(`${r.size} bytes of junk`, "chat", body), chunks: r.chunks }, tooLarge];
      });
      const max = TEST_LIMITS.maxMessages;
      const counted = fc.record({ n: fc.oneof(fc.integer({ min: max - 3, max: max + 3 }), fc.integer({ min: 1, max: 5_000 })), model: fc.constantFrom(...HOSTILE_MODELS) }).map(({ n, model }): [Sent, Expectation] => {
        const body = utf8(JSON.stringify({ model, max_tokens: 1, messages: Array.from({ length: n }, () => ({ role: "u" })) }));
        const over: Expectation = { kind: "error", status: 400, code: "invalid_request", param: "messages", message: new RegExp(`more than the limit of ${max}`) };
        return [post(`${n} messages`, "chat", body), body.length > LIMIT ? tooLarge : n > max ? over : forBytes(body, "chat", true)];
      });
      const cases = fc.oneof({ weight: 3, arbitrary: sized }, { weight: 1, arbitrary: junk }, { weight: 2, arbitrary: counted });
      return property(cases, RUNS.sizes, ([s, e]) => check(s, e));
    },
    PROPERTY_TIMEOUT,
  );
});

describe("hostile headers", () => {
  it(
    "bad, duplicate and huge Authorization headers get a 401; content-type, request ids, origins and junk headers change nothing they should not",
    () => {
      const cases = fc.record({
        auth: authorization(KEY),
        body: fc.oneof(validChat, validCompletion),
        contentType: fc.option(contentType, { nil: undefined }),
        requestIds: fc.array(requestId, { maxLength: 2 }),
        origin,
        junk: junkHeaders,
      });
      return property(cases, RUNS.headers, (c) => {
        const headers: [string, string][] = [
          ...c.junk,
          ...c.auth.values.map((v): [string, string] => ["authorization", v]),
          ...c.requestIds.map((v): [string, string] => ["x-request-id", v]),
        ];
        if (c.contentType !== undefined) headers.push(["content-type", c.contentType]);
        if (c.origin !== undefined) headers.push(["origin", c.origin]);
        const bytes = utf8(c.body.text);
        // Judged by the headers as the Headers class keeps them: trimmed, repeats joined with ", ".
        const given = new Headers(headers);
        const e: Expectation = c.auth.valid ? forBytes(bytes, c.body.endpoint, true) : { kind: "error", status: 401, type: "authentication_error", code: "invalid_api_key" };
        return check(post(`${c.auth.label}, ${c.body.label}`, c.body.endpoint, bytes, headers), e, (a) => {
          const id = given.get("x-request-id");
          const echoed = a.headers.get("x-request-id");
          if (id !== null && REQUEST_ID.test(id) ? echoed !== id : !/^[0-9a-f-]{36}$/.test(echoed ?? "")) return `x-request-id ${echoed} for ${JSON.stringify(id)}`;
          const allowed = a.headers.get("access-control-allow-origin");
          const expected = given.get("origin") === "https://app.example" ? "https://app.example" : null;
          return allowed === expected ? null : `access-control-allow-origin ${allowed} for origin ${given.get("origin")}`;
        });
      });
    },
    PROPERTY_TIMEOUT,
  );
});

describe("hostile methods and paths", () => {
  /** The answer for a path that names a route (or none) as it is written. */
  function routeExpectation(m: string, p: string, withKey: boolean, body: Uint8Array | null, bodyFor: Endpoint | null): Expectation {
    if (m === "OPTIONS") return { kind: "empty", status: 204 };
    const route = p.split("?")[0] as string;
    const get = m === "GET" || m === "HEAD";
    const unknown: Expectation = { kind: "error", status: 404, code: "unknown_url" };
    const notAllowed: Expectation = { kind: "error", status: 405, code: "method_not_allowed" };
    let e: Expectation;
    if (route === "/health") e = get ? { kind: "get", route } : notAllowed;
    else if ((PASSED_THROUGH_ROUTES as readonly string[]).includes(route)) {
      if (!withKey) e = { kind: "error", status: 401, code: "invalid_api_key" };
      else if (m !== "POST") e = notAllowed;
      // The bodies generated here are chat's, completions' or junk: mostly a 400, but a chat body is
      // also an embeddings request (vLLM embeds messages), which the fleet answers.
      else e = body !== null && body.length > LIMIT ? tooLarge : { kind: "loose", authed: true };
    } else if (!route.startsWith("/v1/")) e = unknown;
    else if (!withKey) e = { kind: "error", status: 401, code: "invalid_api_key" };
    else if (route === "/v1/models") e = get ? { kind: "get", route } : notAllowed;
    else if (route === "/v1/kvgate/status") e = get ? { kind: "get", route } : notAllowed;
    else if (route === CHAT || route === COMPLETIONS) {
      const endpoint: Endpoint = route === CHAT ? "chat" : "completions";
      if (m !== "POST") e = notAllowed;
      else e = body === null ? { kind: "error", status: 400, code: "invalid_json" } : forBytes(body, endpoint, bodyFor === endpoint);
    } else e = unknown;
    if (m !== "HEAD") return e;
    return { kind: "empty", status: e.kind === "error" ? e.status : 200 };
  }

  it(
    "any method on any path gets the route's answer, a 404 or a 405, and never a 200 past auth without a key",
    () => {
      const body = fc.oneof(
        fc.oneof(validChat, validCompletion).map((c) => ({ bytes: utf8(c.text), validFor: c.endpoint as Endpoint | null })),
        malformed.map((c) => ({ bytes: c.bytes, validFor: null })),
        fc.constant(null),
      );
      const cases = fc.record({ method, path, withKey: fc.boolean(), body });
      return property(cases, RUNS.routes, (c) => {
        const m = normalise(c.method);
        // GET and HEAD requests cannot carry a body.
        const bytes = m === "GET" || m === "HEAD" ? null : (c.body?.bytes ?? null);
        const headers: [string, string][] = c.withKey ? [authed(), jsonType] : [jsonType];
        const s: Sent = { label: `${c.withKey ? "with" : "without"} key`, method: c.method, path: c.path.path, headers, body: bytes };
        const e: Expectation = c.path.exact ? routeExpectation(m, c.path.path, c.withKey, bytes, c.body?.validFor ?? null) : { kind: "loose", authed: c.withKey };
        return check(s, e);
      });
    },
    PROPERTY_TIMEOUT,
  );
});

describe("configured limits at their boundaries", () => {
  const body = (n: number, pad = "x") => bodyOfSize(n, pad);

  it.each([
    ["whole", undefined],
    ["streamed in 1000-byte chunks", [1000]],
    ["streamed in 1-byte and 7000-byte chunks", [1, 7000]],
  ] as const)("a body of exactly limits.maxBodyBytes is served, one byte more is a 413 (%s)", async (_name, chunks) => {
    for (const pad of ["x", "€"]) {
      const atLimit = body(LIMIT, pad);
      const over = body(LIMIT + 1, pad);
      expect([atLimit.length, over.length]).toEqual([LIMIT, LIMIT + 1]);
      await check({ ...post("at the limit", "chat", atLimit), chunks: chunks ? [...chunks] : undefined }, forBytes(atLimit, "chat", true));
      await check({ ...post("one byte over", "chat", over), chunks: chunks ? [...chunks] : undefined }, tooLarge);
    }
    await expectSettled();
  });

  it("an endless streamed body is refused once it passes the limit, its rest dropped unbuffered only as far as a refused body's (DISCARD_BYTES)", async () => {
    // What follows the limit is read and dropped so that the 413 reaches a client still sending
    // (test/e2e/request-limits.test.ts); an endless one is cut at the bound.
    const chunk = new Uint8Array(64 * 1024).fill(0x20);
    let pulled = 0;
    const endless = new ReadableStream<Uint8Array>({ pull: (c) => void ((pulled += chunk.length), c.enqueue(chunk)) }, { highWaterMark: 0 });
    const res = await gateway(CHAT, { method: "POST", body: endless });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("body_too_large");
    expect(pulled).toBeGreaterThan(LIMIT + DISCARD_BYTES);
    expect(pulled).toBeLessThanOrEqual(LIMIT + DISCARD_BYTES + 4 * chunk.length);
  });

  it("a declared content-length over the limit is refused before the body is read", async () => {
    await check(post("declared too long", "chat", utf8("{}"), [authed(), ["content-length", String(LIMIT + 1)]]), tooLarge);
  });

  it("a body nested 128 levels deep is served, 129 levels is a 400 before routing", async () => {
    // The body is level 1 and "x" holds the rest.
    const at = (levels: number) => utf8(`{"model":"hostile","max_tokens":1,"messages":[{"role":"user","content":"x"}],"x":${nested(levels - 1, "mixed").text}}`);
    await check(post("128 levels", "chat", at(MAX_DEPTH)), forBytes(at(MAX_DEPTH), "chat", true));
    await check(post("129 levels", "chat", at(MAX_DEPTH + 1)), { kind: "error", status: 400, code: "json_too_deep" });
    await expectSettled();
  });

  it("deep nesting that once overflowed the upstream serialiser is refused, and leaves the backends healthy", async () => {
    // Found by the headers property: an index-like key ("0") puts JSON.stringify on its recursive
    // path, a few thousand brackets then overflow it after routing, the failure was blamed on the
    // backend, failover spread it to every backend and the group's breakers opened (503 for all).
    const deep = `{"model":"hostile","messages":[{"role":"system","content":[{"seed":{"0":""},"type":""}]}],"max_tokens":1,"seed":${nested(5077, "array").text}}`;
    await check(post("5077 levels", "chat", utf8(deep)), { kind: "error", status: 400, code: "json_too_deep" });
    await check(post("a valid body after it", "chat", utf8(JSON.stringify({ model: "hostile", max_tokens: 1, messages: [{ role: "user", content: "hi" }] }))), {
      kind: "parsed",
      value: { model: "hostile" },
      endpoint: "chat",
      valid: true,
    });
    await expectSettled();
  });

  it("limits.maxMessages messages are served, one more is a 400 naming messages", async () => {
    const messages = (n: number) => utf8(JSON.stringify({ model: "hostile", max_tokens: 1, messages: Array.from({ length: n }, () => ({ role: "user", content: "m" })) }));
    await check(post("at the message limit", "chat", messages(TEST_LIMITS.maxMessages)), forBytes(messages(TEST_LIMITS.maxMessages), "chat", true));
    await check(post("one message over", "chat", messages(TEST_LIMITS.maxMessages + 1)), {
      kind: "error",
      status: 400,
      code: "invalid_request",
      param: "messages",
      message: new RegExp(`${TEST_LIMITS.maxMessages + 1} items, more than the limit of ${TEST_LIMITS.maxMessages}`),
    });
    await expectSettled();
  });

  /** Route calls the group's Durable Object has answered: a request refused at the edge makes none. */
  const routed = async () => (await status("hostile")).calls.route;

  it("an over-limit messages array is refused for its count before any message is validated, and never routed", async () => {
    const before = await routed();
    // Items the schema refuses: an error about the count shows the schema never walked them.
    const body = utf8(JSON.stringify({ model: "hostile", max_tokens: 1, messages: Array.from({ length: TEST_LIMITS.maxMessages + 1 }, () => 0) }));
    await check(post("over the message limit, every message invalid", "chat", body), { kind: "error", status: 400, code: "invalid_request", param: "messages", message: /more than the limit/ });
    expect(await routed()).toBe(before);
  });

  const user = { role: "user", content: "hi" };
  const part = { type: "text", text: "p" };
  const call = { id: "c", type: "function", function: { name: "f", arguments: "{}" } };
  const many = <T>(n: number, item: T): T[] => Array.from({ length: n }, () => item);
  it.each([
    { limit: "maxTools", max: TEST_LIMITS.maxTools, fields: (n: number) => ({ messages: [user], tools: many(n, { type: "function", function: { name: "f" } }) }), param: "tools" },
    // Summed over the messages: the second message passes the limit.
    { limit: "maxContentParts", max: TEST_LIMITS.maxContentParts, fields: (n: number) => ({ messages: [{ role: "user", content: many(n - 1, part) }, { role: "user", content: [part] }] }), param: "messages[1].content" },
    {
      limit: "maxToolCalls",
      max: TEST_LIMITS.maxToolCalls,
      fields: (n: number) => ({ messages: [user, { role: "assistant", content: null, tool_calls: many(n - 1, call) }, { role: "tool", content: "r", tool_call_id: "c" }, { role: "assistant", content: null, tool_calls: [call] }, user] }),
      param: "messages[3].tool_calls",
    },
  ])("limits.$limit: at the limit the request is served, one more is a 400 naming $param and is never routed", async ({ max, fields, param }) => {
    const body = (n: number) => utf8(JSON.stringify({ model: "hostile", max_tokens: 1, ...fields(n) }));
    await check(post("at the limit", "chat", body(max)), forBytes(body(max), "chat", true));
    const before = await routed();
    await check(post("one over", "chat", body(max + 1)), { kind: "error", status: 400, type: "invalid_request_error", code: "invalid_request", param, message: new RegExp(`more than (the limit of )?${max}\\b`) });
    expect(await routed()).toBe(before);
    await expectSettled();
  });

  it("an object of 1,024 keys is served, 1,025 keys is a 400 naming the field that holds it, before parsing", async () => {
    const body = (keys: number) => utf8(`{"model":"hostile","max_tokens":1,"messages":[{"role":"user","content":"x"}],"logit_bias":{${Array.from({ length: keys }, (_, i) => `"${i}":0`).join(",")}}}`);
    const max = BODY_SHAPE.maxObjectKeys;
    await check(post("at the key limit", "chat", body(max)), forBytes(body(max), "chat", true));
    const before = await routed();
    await check(post("one key over", "chat", body(max + 1)), { kind: "error", status: 400, code: "json_too_complex", param: "logit_bias", message: new RegExp(`more than ${max} keys`) });
    expect(await routed()).toBe(before);
    await expectSettled();
  });

  // Group hostile-prefix hashes blocks of 8 characters and sends at most 4. A chat message is
  // hashed as "\u0001user\u0002" (6 characters) plus its content, and closes its last block.
  it.each([
    ["chat", 18, 3],
    ["chat", 19, 4],
    ["chat", 26, 4],
    ["chat", 27, 4],
    ["chat", 20_000, 4],
    ["completions", 32, 4],
    ["completions", 33, 4],
    ["completions", 24, 3],
  ] as const)("maxPrefixBlocks caps the fingerprint: %s content of %i characters → %i blocks", async (endpoint, chars, blocks) => {
    const content = "b".repeat(chars);
    const json = endpoint === "chat" ? { model: "hostile-prefix", max_tokens: 1, messages: [{ role: "user", content }] } : { model: "hostile-prefix", max_tokens: 1, prompt: content };
    const res = await gateway(PATH_OF[endpoint], { method: "POST", body: JSON.stringify(json) });
    await res.text();
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-prefix-blocks")).toMatch(new RegExp(`^\\d+/${blocks}$`));
  });

  it("a long conversation stops hashing at the cap too", async () => {
    const messages = Array.from({ length: 50 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `turn ${i}` }));
    const res = await gateway(CHAT, { method: "POST", body: JSON.stringify({ model: "hostile-prefix", max_tokens: 1, messages }) });
    await res.text();
    expect(res.headers.get("x-kvgate-prefix-blocks")).toMatch(/^\d+\/4$/);
    await expectSettled();
  });
});
