import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { connect, opened, type OpenSocket, type Received } from "../support/websocket-client.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What a realtime session's client may send and spend, through the gateway over real sockets: each
 * message held to a request body's bounds (a maxBodyBytes smaller than the default's, so a test
 * needs no 4 MiB frames to show the rule), and a key's tokens and limits held while its session is open.
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
      modelGroups: [{ name: "echo", deployments: [at("echo")] }],
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

describe("a client's message past a request body's bounds", () => {
  it("is not passed on: its client is answered an error event, as a request body over maxBodyBytes or BODY_SHAPE is refused, and the session goes on", async () => {
    const s = await open("echo");
    const refused = async (message: string) => {
      s.ws.send(message);
      return parsed(await s.next());
    };
    // Over maxBodyBytes: a session.update (which the gateway parses), and audio (which it does not).
    const bigUpdate = JSON.stringify({ type: "session.update", session: { instructions: "x".repeat(MAX_BODY_BYTES) } });
    expect(await refused(bigUpdate)).toEqual({ type: "error", error: { type: "invalid_request_error", code: "body_too_large", message: `event exceeds the ${MAX_BODY_BYTES}-byte limit`, param: null } });
    const bigAudio = JSON.stringify({ type: "input_audio_buffer.append", audio: "A".repeat(MAX_BODY_BYTES) });
    expect(await refused(bigAudio)).toMatchObject({ type: "error", error: { code: "body_too_large" } });
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
    // None of them reached the backend: the next message it echoes is the next one sent.
    s.ws.send(JSON.stringify({ type: "session.update", model: "mine" }));
    expect(parsed(await s.next())).toEqual({ type: "session.update", model: "upstream-rt" });
    s.ws.close(1000);
    await s.closed;
    await vi.waitFor(async () => expect(await gw.inFlight("echo")).toBe(0), EVENTUALLY);
  });
});
