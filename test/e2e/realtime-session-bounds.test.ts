import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { connect, opened, type OpenSocket, type Received } from "../support/websocket-client.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What a realtime session's client may send and spend, through the gateway over real sockets: each
 * message the gateway parses (a session.update) held to a request body's bounds, others passed on
 * unread (a maxBodyBytes smaller than the default's, so a test needs no 4 MiB frames to show the rule), and a key's tokens and limits held while its session is open.
 */

let upstream: WebSocketUpstream;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const MAX_BODY_BYTES = 512 * 1024;

const at = (behaviour: string, id = behaviour.replace(/:.*/, "")) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "upstream-rt" });

beforeAll(async () => {
  upstream = await startWebSocketUpstream();
  gw = await startTestGateway(
    {
      limits: { maxBodyBytes: MAX_BODY_BYTES },
      modelGroups: [
        { name: "echo", deployments: [at("echo")] },
        // vLLM's streaming transcription: a delta per audio append once a commit began it.
        { name: "streams", deployments: [at("vllm-stream")] },
        // The same, its server ending the session after its 20th delta, no transcription.done.
        { name: "streams-ending", deployments: [at("vllm-stream:20", "vllm-stream-20")] },
        // The same, its server going away (1001), restarting (1012) or overloaded (1013) after its 20th delta.
        ...[1001, 1012, 1013].map((code) => ({ name: `streams-broken-${code}`, deployments: [at(`vllm-stream:20:${code}`, `vllm-stream-${code}`)] })),
        // vLLM-Omni's full-duplex server: 14 tokens (10 in, 4 out) reported in each response.done.
        { name: "type-last", deployments: [at("omni-duplex")] },
        // A server whose response.done carries no usage (Speaches): five text deltas a response.
        { name: "no-usage", deployments: [at("no-usage")] },
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey },
  );
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const wsUrl = (query: string) => `${gw.url.replace(/^http/, "ws")}/v1/realtime${query}`;
const open = async (model: string, key = gw.key): Promise<OpenSocket> => opened(await connect(wsUrl(`?model=${model}`), { headers: { authorization: `Bearer ${key}` } }));
const parsed = (m: Received) => JSON.parse(m.data.toString("utf8")) as Record<string, unknown>;
const admin = (method: string, path: string, body?: unknown) =>
  fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
/** A new virtual key made with `fields`, and a reader of its usage. */
async function newKey(fields: Record<string, unknown>): Promise<{ id: string; key: string; usage: () => Promise<Record<string, unknown>> }> {
  const made = await admin("POST", "/keys", fields);
  expect(made.status).toBe(201);
  const { id, key } = (await made.json()) as { id: string; key: string };
  return { id, key, usage: async () => (await (await admin("GET", `/usage?key=${id}`)).json()) as Record<string, unknown> };
}
const audioChunk = JSON.stringify({ type: "input_audio_buffer.append", audio: Buffer.alloc(4800).toString("base64") });

/** A streaming transcription begun on `s` (its model named, a commit sent) and `n` of its deltas read, one an audio chunk. */
async function readDeltas(s: OpenSocket, group: string, n: number): Promise<void> {
  await s.event("session.created");
  s.ws.send(JSON.stringify({ type: "session.update", model: group }));
  s.ws.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
  for (let i = 0; i < n; i++) {
    s.ws.send(audioChunk);
    await s.event("transcription.delta");
  }
}

describe("a client's message past a request body's bounds", () => {
  it("a session.update is not passed on: its client is answered an error event, as a request body over maxBodyBytes or BODY_SHAPE is refused, and the session goes on", async () => {
    const s = await open("echo");
    const refused = async (message: string) => {
      s.ws.send(message);
      return parsed(await s.next());
    };
    // A session.update (which the gateway parses) over maxBodyBytes; the client's event_id, which
    // its head or end names, is named in the error, as OpenAI's server names the event it refuses.
    const bigUpdate = JSON.stringify({ type: "session.update", session: { instructions: "x".repeat(MAX_BODY_BYTES) } });
    expect(await refused(bigUpdate)).toEqual({ type: "error", error: { type: "invalid_request_error", code: "body_too_large", message: `event exceeds the ${MAX_BODY_BYTES}-byte limit`, param: null } });
    const named = JSON.stringify({ type: "session.update", event_id: "evt_big", session: { instructions: "x".repeat(MAX_BODY_BYTES) } });
    expect(await refused(named)).toMatchObject({ type: "error", error: { code: "body_too_large", event_id: "evt_big" } });
    const namedLast = JSON.stringify({ session: { instructions: "x".repeat(MAX_BODY_BYTES) }, type: "session.update", event_id: "evt_last" });
    expect(await refused(namedLast)).toMatchObject({ type: "error", error: { code: "body_too_large", event_id: "evt_last" } });
    // Counted in UTF-8, as a body's bytes are: fewer characters than the limit, two bytes each.
    const wide = JSON.stringify({ type: "session.update", session: { instructions: "é".repeat(MAX_BODY_BYTES / 2) } });
    expect(wide.length).toBeLessThan(MAX_BODY_BYTES);
    expect(await refused(wide)).toMatchObject({ type: "error", error: { code: "body_too_large" } });
    // Within the bytes, past BODY_SHAPE: 200 levels deep, and 140,000 objects (131,072 at most).
    const deep = `{"type":"session.update","session":{"x":${"[".repeat(200)}${"]".repeat(200)}}}`;
    expect(await refused(deep)).toMatchObject({ type: "error", error: { code: "json_too_deep", param: "session" } });
    const many = `{"type":"session.update","session":{"x":[${"{},".repeat(140_000)}{}]}}`;
    expect(many.length).toBeLessThan(MAX_BODY_BYTES);
    expect(await refused(many)).toMatchObject({ type: "error", error: { code: "json_too_complex", param: "session" } });
    // One it cannot read as JSON names its event_id too.
    expect(await refused('{"event_id":"evt_nan","type":"session.update","temperature":NaN}')).toMatchObject({ type: "error", error: { code: "invalid_json", event_id: "evt_nan" } });
    // None of them reached the backend: the next message it echoes is the next one sent.
    s.ws.send(JSON.stringify({ type: "session.update", model: "mine" }));
    expect(parsed(await s.next())).toEqual({ type: "session.update", model: "upstream-rt" });
    s.ws.close(1000);
    await s.closed;
    await vi.waitFor(async () => expect(await gw.inFlight("echo")).toBe(0), EVENTUALLY);
  });

  it("holds only what the gateway parses: audio longer than maxBodyBytes (OpenAI and vLLM-Omni take 15 MiB an append) is passed on as it came, unread", async () => {
    const s = await open("echo");
    // What the backend echoed: true when it is what was sent, else its head (a refusal's error event).
    const echoed = async (sent: string) => {
      s.ws.send(sent);
      const back = (await s.next()).data.toString("utf8");
      return back === sent || back.slice(0, 200);
    };
    expect(await echoed(JSON.stringify({ type: "input_audio_buffer.append", audio: "A".repeat(2 * MAX_BODY_BYTES) }))).toBe(true);
    const item = { type: "message", role: "user", content: [{ type: "input_audio", audio: "B".repeat(2 * MAX_BODY_BYTES) }] };
    expect(await echoed(JSON.stringify({ type: "conversation.item.create", item }))).toBe(true);
    s.ws.close(1000);
    await s.closed;
    await vi.waitFor(async () => expect(await gw.inFlight("echo")).toBe(0), EVENTUALLY);
  });
});

describe("a virtual key's streaming transcription whose end never comes", () => {
  it("a client's binary message is answered an error event, not passed on: vLLM reads text only, and would end the session with its transcription unreported", async () => {
    const { key, usage } = await newKey({ track_usage: true });
    const s = await open("streams", key);
    await readDeltas(s, "streams", 20);
    s.ws.send(Buffer.from([1, 2, 3]));
    expect(parsed(await s.next())).toMatchObject({ type: "error", error: { type: "invalid_request_error", code: "binary_message_unsupported" } });
    // The session goes on: the backend never saw it.
    s.ws.send(audioChunk);
    await s.event("transcription.delta");
    s.ws.close(1000);
    await s.closed;
    // Left before its end: a token a delta, as a stream its client left is.
    await vi.waitFor(async () => expect(await usage()).toMatchObject({ requests: 1, completion_tokens: 21 }), EVENTUALLY);
  });

  it("is charged the deltas it relayed when its backend ends the session with a close that is no failure, as when its client leaves: reading a transcription is not free", async () => {
    const { key, usage } = await newKey({ track_usage: true });
    const s = await open("streams-ending", key);
    await readDeltas(s, "streams-ending", 20);
    expect(await s.closed).toEqual({ code: 1000, reason: "" });
    await vi.waitFor(async () => expect(await gw.inFlight("streams-ending")).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect((await usage()).requests).toBe(1), EVENTUALLY);
    expect(await usage()).toMatchObject({ prompt_tokens: 0, completion_tokens: 20 });
  });

  it.each([1001, 1012, 1013])("is not charged when its backend breaks it off with %i (going away, restarting, try again later), which is its backend's failure, as a stream it broke off is", async (code) => {
    const { key, usage } = await newKey({ track_usage: true });
    const group = `streams-broken-${code}`;
    const s = await open(group, key);
    await readDeltas(s, group, 20);
    expect(await s.closed).toEqual({ code, reason: "" });
    // Settled as its backend's failure, no breaker success: its lease charged nothing.
    await vi.waitFor(async () => expect((await gw.status(group)).backends.map((b) => [b.inFlight, b.completed, b.failed])).toEqual([[0, 0, 1]]), EVENTUALLY);
    // Charging nothing writes no usage row, so there is nothing to wait for: a witness session of the
    // same key on the same routing object, which its client leaves after 3 deltas (charged 3), is.
    // That object sends its rows in order, so once the witness's shows, a row of the broken
    // session's would have too: the key's usage is the witness's alone.
    const witness = await open(group, key);
    await readDeltas(witness, group, 3);
    witness.ws.close(1000);
    await witness.closed;
    await vi.waitFor(async () => expect((await usage()).requests).toBeGreaterThanOrEqual(1), EVENTUALLY);
    expect(await usage()).toMatchObject({ requests: 1, prompt_tokens: 0, completion_tokens: 3 });
  });
});

/** `s`'s close, or null when it stays open `ms` more. */
const closedWithin = (s: OpenSocket, ms: number) => Promise.race([s.closed, new Promise<null>((r) => setTimeout(() => r(null), ms))]);

describe("a virtual key's tpm, inside an open session", () => {
  it("holds as its budget does: the session whose tokens reach it is closed with 1008 and the message of the 429 its requests get", async () => {
    const { key } = await newKey({ tpm: 30 });
    const s = await open("type-last", key);
    await s.event("session.created");
    // 14 tokens a response: the third reaches 30 within the minute, and is served, as a request's is.
    for (let i = 0; i < 3; i++) {
      s.ws.send(JSON.stringify({ type: "response.create" }));
      expect((await s.event("response.done")).response).toMatchObject({ usage: { total_tokens: 14 } });
    }
    expect(await closedWithin(s, 3000)).toEqual({ code: 1008, reason: expect.stringMatching(/^API key sk-kvg-\w{5}… reached its tokens per minute$/) });
    await vi.waitFor(async () => expect(await gw.inFlight("type-last")).toBe(0), EVENTUALLY);
    const refused = await connect(wsUrl("?model=type-last"), { headers: { authorization: `Bearer ${key}` } });
    expect(refused.kind === "refused" && [refused.status, refused.body.error.code]).toEqual([429, "rate_limit_exceeded"]);
  });
});

describe("a virtual key's session on a backend whose response.done reports no usage (Speaches)", () => {
  it("is charged each response's deltas, a token each, as a response cut short is: its budget ends the session with 1008", async () => {
    const { key, usage } = await newKey({ budget_tokens: 8, budget_period: "total" });
    const s = await open("no-usage", key);
    await s.event("session.created");
    // 5 deltas a response: the second reaches the 8, and is served, as a request's is.
    for (let i = 0; i < 2; i++) {
      s.ws.send(JSON.stringify({ type: "response.create" }));
      expect((await s.event("response.done")).response).toMatchObject({ status: "completed", usage: null });
    }
    expect(await closedWithin(s, 3000)).toEqual({ code: 1008, reason: expect.stringMatching(/^API key sk-kvg-\w{5}… reached its budget for the period; the budget does not renew$/) });
    await vi.waitFor(async () => expect((await usage()).requests).toBe(1), EVENTUALLY);
    expect(await usage()).toMatchObject({ prompt_tokens: 0, completion_tokens: 10 });
    const refused = await connect(wsUrl("?model=no-usage"), { headers: { authorization: `Bearer ${key}` } });
    expect(refused.kind === "refused" && [refused.status, refused.body.error.code]).toEqual([429, "insufficient_quota"]);
  });
});

describe("a virtual key given a budget while its session, opened counting nothing, is open", () => {
  it("ends the session with 1008 within the 10 s in which a changed key takes effect: a session whose tokens were never read cannot be held to the new limit", async () => {
    const { id, key } = await newKey({ track_usage: false });
    const s = await open("echo", key);
    s.ws.send("before");
    expect((await s.next()).data.toString()).toBe("before");
    expect((await admin("PATCH", `/keys/${id}`, { budget_tokens: 1 })).status).toBe(200);
    expect(await closedWithin(s, 12_000)).toEqual({ code: 1008, reason: expect.stringMatching(/^API key sk-kvg-\w{5}… now counts its usage/) });
    await vi.waitFor(async () => expect(await gw.inFlight("echo")).toBe(0), EVENTUALLY);
  }, 30_000);
});
