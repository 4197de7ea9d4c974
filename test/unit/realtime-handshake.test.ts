import { describe, expect, it } from "vitest";
import { clientCloseOutcome, forwardedClose, upstreamCloseOutcome, CLIENT_LOST, UPSTREAM_LOST } from "../../src/realtime/closing.ts";
import { chosenProtocol, keyFromProtocols, protocolsWithoutKey, subprotocolAuthorization } from "../../src/realtime/handshake.ts";
import { classifyRefusedUpgrade } from "../../src/realtime/upgrade-answer.ts";

const upgrade = (protocols: string) => new Headers({ upgrade: "websocket", "sec-websocket-protocol": protocols });

describe("the key a browser offers as a subprotocol", () => {
  it("is read from openai-insecure-api-key.<key>, wherever it stands among the offered", () => {
    expect(keyFromProtocols("realtime, openai-insecure-api-key.sk-1, openai-beta.realtime-v1")).toBe("sk-1");
    expect(keyFromProtocols("realtime")).toBeNull();
    expect(keyFromProtocols(null)).toBeNull();
  });

  it("is never offered upstream", () => {
    expect(protocolsWithoutKey(" realtime ,openai-insecure-api-key.sk-1,, openai-beta.realtime-v1")).toEqual(["realtime", "openai-beta.realtime-v1"]);
  });

  it("stands for an Authorization header on a WebSocket handshake only, and never when empty", () => {
    expect(subprotocolAuthorization(upgrade("realtime, openai-insecure-api-key.sk-1"))).toBe("Bearer sk-1");
    expect(subprotocolAuthorization(new Headers({ "sec-websocket-protocol": "openai-insecure-api-key.sk-1" }))).toBeNull();
    expect(subprotocolAuthorization(upgrade("realtime, openai-insecure-api-key."))).toBeNull();
  });
});

describe("the subprotocol the client gets back", () => {
  it("is the upstream's choice when the client offered it, else the client's first, else none", () => {
    expect(chosenProtocol(["realtime", "openai-beta.realtime-v1"], "openai-beta.realtime-v1")).toBe("openai-beta.realtime-v1");
    expect(chosenProtocol(["realtime"], "something-else")).toBe("realtime");
    expect(chosenProtocol(["realtime"], null)).toBe("realtime");
    expect(chosenProtocol([], null)).toBeNull();
  });
});

describe("closes passed from one side to the other", () => {
  it("keep their code and reason; none stays none; a broken connection or an unsendable code becomes the side's 'lost' close", () => {
    expect(forwardedClose(4001, "done", CLIENT_LOST)).toEqual({ code: 4001, reason: "done" });
    expect(forwardedClose(1000, "", UPSTREAM_LOST)).toEqual({ code: 1000, reason: "" });
    expect(forwardedClose(1005, "", UPSTREAM_LOST)).toEqual({});
    expect(forwardedClose(1006, "", UPSTREAM_LOST)).toEqual(UPSTREAM_LOST);
    expect(forwardedClose(1015, "", CLIENT_LOST)).toEqual(CLIENT_LOST);
    expect(forwardedClose(2000, "", CLIENT_LOST)).toEqual(CLIENT_LOST);
  });

  it("from the upstream, without the secrets the gateway sent it: whole, or cut at the frame's bound, and never past the bound once replaced", () => {
    const key = "sk-up-0123456789abcdef";
    expect(forwardedClose(4000, `bad key Bearer ${key}!`, UPSTREAM_LOST, [key])).toEqual({ code: 4000, reason: "bad key Bearer [redacted]!" });
    expect(forwardedClose(4000, `bad key ${key.slice(0, 9)}`, UPSTREAM_LOST, [key])).toEqual({ code: 4000, reason: "bad key [redacted]" });
    // Three characters of a secret at the end tell nothing: the reason is left as it came.
    expect(forwardedClose(4000, "all ok sk-", UPSTREAM_LOST, [key]).reason).toBe("all ok sk-");
    // A one-character secret made ten by its replacement: cut back to 123 bytes, at a character's edge.
    const cut = forwardedClose(4000, `k${"é".repeat(61)}`, UPSTREAM_LOST, ["k"]).reason ?? "";
    expect(cut).toBe(`[redacted]${"é".repeat(56)}`);
    expect(new TextEncoder().encode(cut).length).toBeLessThanOrEqual(123);
    expect(forwardedClose(1000, `nothing secret here`, UPSTREAM_LOST, [key])).toEqual({ code: 1000, reason: "nothing secret here" });
  });

  it("say what they say about the backend: a session it served, once it sent something", () => {
    expect([1000, 1008, 4000].map((c) => upstreamCloseOutcome(c, true))).toEqual(["ok", "ok", "ok"]);
    // A failure, served or not: broken off, an internal error, a gateway's upstream failed; the server going away, restarting, overloaded.
    for (const served of [true, false]) expect([1006, 1011, 1014, 1001, 1012, 1013].map((c) => upstreamCloseOutcome(c, served))).toEqual(Array(6).fill("upstream-error"));
    expect([1000, 1005, 4001].map((c) => clientCloseOutcome(c, true))).toEqual(["ok", "ok", "ok"]);
    expect(clientCloseOutcome(1006, true)).toBe("client-abort");
  });

  it("one that refuses what the client sent (unsupported, invalid, too big): no verdict, served or not — no breaker success for a session its client's message ended", () => {
    for (const served of [true, false]) expect([1003, 1007, 1009].map((c) => upstreamCloseOutcome(c, served))).toEqual(["client-abort", "client-abort", "client-abort"]);
  });

  it("before the backend sent anything: no verdict, but a 1001, 1012 or 1013 (going away, restarting, try again later) from it is a failure", () => {
    expect([1000, 1008, 4000].map((c) => upstreamCloseOutcome(c, false))).toEqual(["client-abort", "client-abort", "client-abort"]);
    expect([1001, 1012, 1013].map((c) => upstreamCloseOutcome(c, false))).toEqual(["upstream-error", "upstream-error", "upstream-error"]);
    expect([1000, 1005, 1006, 4001].map((c) => clientCloseOutcome(c, false))).toEqual(["client-abort", "client-abort", "client-abort", "client-abort"]);
  });
});

describe("an upstream that did not switch protocols", () => {
  it("serves no WebSocket there when it answered 200, as when it answered an engine's 404 or an ASGI server's bodiless 403; the rest means what it means for any request", () => {
    expect(classifyRefusedUpgrade(200)).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    expect(classifyRefusedUpgrade(404, { message: "Not Found", type: null, code: null, param: null, extra: {} })).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    expect(classifyRefusedUpgrade(403, null, null, true)).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    // With no body too (an engine's router may give none); a 403 that says why is a proxy's refusal (an Access page, a WAF's), held for the group's word.
    expect(classifyRefusedUpgrade(404)).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    expect(classifyRefusedUpgrade(403, { message: "Unauthorized", type: null, code: null, param: null, extra: {} })).toEqual({ kind: "backend-failure", why: "refused" });
    expect(classifyRefusedUpgrade(400)).toEqual({ kind: "rejected" });
    expect(classifyRefusedUpgrade(429)).toEqual({ kind: "rate-limited" });
    expect(classifyRefusedUpgrade(500)).toEqual({ kind: "backend-failure", why: "server-error" });
    expect(classifyRefusedUpgrade(503)).toEqual({ kind: "backend-failure", why: "server-error" });
    // A 503 that says it is the server's state, as a request's does (src/upstream/answer.ts).
    expect(classifyRefusedUpgrade(503, null, "30")).toEqual({ kind: "backend-failure", why: "unavailable" });
    expect(classifyRefusedUpgrade(503, { message: "Loading model", type: "unavailable_error", code: 503, param: null, extra: {} })).toEqual({ kind: "backend-failure", why: "unavailable" });
    expect(classifyRefusedUpgrade(401)).toEqual({ kind: "backend-failure", why: "credentials" });
  });

  it("takes a 4xx that is a proxy's HTML page for its refusal, as a request's is; an engine's plain text or JSON, and a bodiless 403, as before", () => {
    expect(classifyRefusedUpgrade(400, null, null, false, "text/html")).toEqual({ kind: "backend-failure", why: "refused" });
    expect(classifyRefusedUpgrade(400, null, null, false, "text/plain; charset=utf-8")).toEqual({ kind: "rejected" });
    expect(classifyRefusedUpgrade(400, { message: "bad query", type: null, code: null, param: null, extra: {} }, null, false, "application/json")).toEqual({ kind: "rejected" });
    expect(classifyRefusedUpgrade(403, null, null, true, "text/html")).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    expect(classifyRefusedUpgrade(413, null, null, false, "text/html")).toEqual({ kind: "rejected" });
  });
});
