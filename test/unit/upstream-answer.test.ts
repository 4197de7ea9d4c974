import { describe, expect, it } from "vitest";
import { backendAsSeen, classifyStatus, clientError, failureKind, isBackendsOwn, streamErrorAnswer, type Answer } from "../../src/upstream/answer.ts";
import { parseUpstreamError } from "../../src/upstream/error-body.ts";
import { backoff, isServerSide, nextStep, parseRetryAfter, type RetryPolicy } from "../../src/upstream/retry.ts";

describe("what an upstream status means", () => {
  it.each<[number, boolean, Answer]>([
    [200, true, { kind: "success" }],
    [200, false, { kind: "backend-failure", why: "no-content" }],
    [204, false, { kind: "backend-failure", why: "no-content" }],
    [201, true, { kind: "backend-failure", why: "status" }],
    [301, false, { kind: "backend-failure", why: "redirect" }],
    [304, false, { kind: "backend-failure", why: "redirect" }],
    [307, false, { kind: "backend-failure", why: "redirect" }],
    [400, true, { kind: "rejected" }],
    [413, true, { kind: "rejected" }],
    [422, true, { kind: "rejected" }],
    [401, true, { kind: "backend-failure", why: "credentials" }],
    [403, true, { kind: "backend-failure", why: "refused" }],
    [404, true, { kind: "backend-failure", why: "no-endpoint" }],
    [408, true, { kind: "backend-failure", why: "status" }],
    [429, true, { kind: "rate-limited" }],
    [500, true, { kind: "backend-failure", why: "server-error" }],
    [501, true, { kind: "backend-failure", why: "server-error" }],
    [503, true, { kind: "backend-failure", why: "server-error" }],
    [599, true, { kind: "backend-failure", why: "server-error" }],
  ])("HTTP %i (body: %s)", (status, hasBody, expected) => {
    expect(classifyStatus(status, hasBody)).toEqual(expected);
  });

  it("a 503 is the server's own state when it says so: with a Retry-After, or an unavailable_error (llama.cpp loading its model)", () => {
    const unavailable = { kind: "backend-failure", why: "unavailable" };
    expect(classifyStatus(503, true, null, null, null, "5")).toEqual(unavailable);
    expect(classifyStatus(503, true, { message: "Loading model", type: "unavailable_error", code: 503, param: null, extra: {} })).toEqual(unavailable);
    // A proxy's plain 503 for the engine behind it, which may have crashed on the request.
    expect(classifyStatus(503, true, null, null, "text/plain")).toEqual({ kind: "backend-failure", why: "server-error" });
  });
});

describe("a 200's content-encoding", () => {
  it("one the runtime decodes (gzip, br) or none is a success; any other is the backend's failure, as no-content is", () => {
    for (const coding of [null, "", "gzip", "br", "identity"]) expect(classifyStatus(200, true, null, coding)).toEqual({ kind: "success" });
    for (const coding of ["deflate", "zstd", "x-gzip", "GZIP", "gzip, deflate", "compress"]) expect(classifyStatus(200, true, null, coding)).toEqual({ kind: "backend-failure", why: "encoding" });
    expect(isBackendsOwn("encoding")).toBe(true);
    // An error's body is read for what it says, coded or not; an empty 200 is empty first.
    expect(classifyStatus(500, true, null, "deflate")).toEqual({ kind: "backend-failure", why: "server-error" });
    expect(classifyStatus(200, false, null, "deflate")).toEqual({ kind: "backend-failure", why: "no-content" });
  });
});

describe("a 200's content-type", () => {
  it("an HTML page is the backend's failure, whatever its parameters; JSON, an event stream or none is a success", () => {
    for (const type of ["text/html", "text/html; charset=utf-8", "TEXT/HTML"]) expect(classifyStatus(200, true, null, null, type)).toEqual({ kind: "backend-failure", why: "html" });
    for (const type of [null, "application/json", "text/event-stream", "text/plain"]) expect(classifyStatus(200, true, null, null, type)).toEqual({ kind: "success" });
    expect(isBackendsOwn("html")).toBe(true);
  });
});

describe("a 4xx's body", () => {
  const page = (status: number, text: string) => classifyStatus(status, true, parseUpstreamError(text), null, "text/html");
  const refused: Answer = { kind: "backend-failure", why: "refused" };

  it("a proxy's own page (nginx's, no JSON error in it) is its refusal, held for the group's word as a 403 is: no request causes most", () => {
    const nginx = (status: number, said: string) => `<html>\r\n<head><title>${status} ${said}</title></head>\r\n<body>\r\n<center><h1>${status} ${said}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>`;
    for (const [status, said] of [[400, "The plain HTTP request was sent to HTTPS port"], [400, "No required SSL certificate was sent"], [405, "Not Allowed"], [421, "Misdirected Request"]] as const) {
      expect([status, page(status, nginx(status, said))]).toEqual([status, refused]);
    }
    expect(isBackendsOwn("refused")).toBe(false);
    expect(failureKind("refused")).toBe("credentials");
  });

  it("an engine's JSON error is the request's, whatever its type says: vLLM's, SGLang's, llama.cpp's, TGI's, Ollama's and FastAPI's validation errors", () => {
    for (const body of [
      '{"object":"error","message":"max_tokens must be at least 1","type":"BadRequestError","param":null,"code":400}',
      '{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}',
      '{"error":"Input validation error: `inputs` must have less than 4096 tokens","error_type":"validation"}',
      '{"error":"invalid options"}',
      '{"detail":[{"loc":["body","messages"],"msg":"Field required","type":"missing"}]}',
    ]) {
      for (const type of ["application/json", "application/json; charset=utf-8", "text/html", null]) {
        expect([body, type, classifyStatus(422, true, parseUpstreamError(body), null, type)]).toEqual([body, type, { kind: "rejected" }]);
      }
    }
  });

  it("plain text is an engine's: TGI's (axum's) refusal of a body its types reject, a 422 or a 400, is the request's", () => {
    const axum = "Failed to deserialize the JSON body into the target type: messages[1]: invalid type: null, expected a string at line 1 column 120";
    for (const status of [400, 422]) expect(classifyStatus(status, true, parseUpstreamError(axum), null, "text/plain; charset=utf-8")).toEqual({ kind: "rejected" });
  });

  it("a limit on the request's size (413, 414, 431) is the request's, a proxy's page or not: every backend behind it has it alike", () => {
    for (const [status, said] of [[413, "Request Entity Too Large"], [414, "Request-URI Too Large"], [431, "Request Header Fields Too Large"]] as const) {
      expect([status, page(status, `<html><head><title>${status} ${said}</title></head><body><center><h1>${status} ${said}</h1></center><hr><center>nginx</center></body></html>`)]).toEqual([status, { kind: "rejected" }]);
    }
  });

  it("one whose type is JSON, or unknown (a realtime handshake's refusal, a stream's error event), is taken as the engine's: the request's", () => {
    for (const type of ["application/json", "application/problem+json", null]) expect(classifyStatus(400, true, parseUpstreamError("{}"), null, type)).toEqual({ kind: "rejected" });
    expect(classifyStatus(400, false, null, null, null)).toEqual({ kind: "rejected" });
  });

  it("401, 404, 408 and 429 keep their own meaning, page or not", () => {
    expect(page(401, "<html>401 Authorization Required</html>")).toEqual({ kind: "backend-failure", why: "credentials" });
    expect(page(404, "<html>404 Not Found</html>")).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    expect(page(408, "<html>408 Request Time-out</html>")).toEqual({ kind: "backend-failure", why: "status" });
    expect(page(429, "<html>429 Too Many Requests</html>")).toEqual({ kind: "rate-limited" });
  });

  it("reaches the client, when it was the request's, with its status, the code any upstream rejection has, and nothing of the page; not to be retried", () => {
    const e = clientError(400, refused, null, backendAsSeen({ id: "gpu-a" }, { name: "g" }, true), null);
    expect([e.status, e.code, e.headers]).toEqual([400, "upstream_rejected", { "x-should-retry": "false" }]);
    expect(e.message).toBe("backend gpu-a refused the request (HTTP 400): a proxy in front of its server answered with a page of its own, refusing what the request holds or the way the gateway reaches the server");
  });
});

describe("a 404", () => {
  const said = (param: string | null) => parseUpstreamError(JSON.stringify({ error: { message: "not found", type: "invalid_request_error", param, code: 404 } }));

  it("about the model is a backend that serves another: its own failure, whatever the request", () => {
    expect(classifyStatus(404, true, said("model"))).toEqual({ kind: "backend-failure", why: "not-served" });
    const openai = parseUpstreamError(JSON.stringify({ error: { message: "The model `m` does not exist or you do not have access to it.", type: "invalid_request_error", param: null, code: "model_not_found" } }));
    const ollama = parseUpstreamError(JSON.stringify({ error: "model 'm' not found, try pulling it first" }));
    for (const told of [openai, ollama]) expect(classifyStatus(404, true, told)).toEqual({ kind: "backend-failure", why: "not-served" });
    expect(isBackendsOwn("not-served")).toBe(true);
  });

  it("an engine's saying nothing of the model is a path the server has no route for: an endpoint it does not serve, which may be every backend's", () => {
    // FastAPI's answer (vLLM's, for /v1/embeddings on a chat model), a message naming nothing.
    const fastapi = parseUpstreamError('{"detail":"Not Found"}');
    for (const told of [fastapi, said(null)]) expect(classifyStatus(404, true, told)).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    expect(isBackendsOwn("no-endpoint")).toBe(false);
    expect(failureKind("no-endpoint")).toBe("not-served");
  });

  it("with no error body is an endpoint not served too: Ollama's router's page, TGI's and TEI's empty 404 (a proxy's page for a dropped route reads the same)", () => {
    for (const page of ["404 page not found", "<html><body><h1>404 Not Found</h1></body></html>", ""]) {
      expect(classifyStatus(404, page !== "", parseUpstreamError(page))).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    }
  });

  it("a 501 llama.cpp calls not supported is an endpoint it was not started to serve (embeddings without --embeddings); another 501 is a server error (vLLM's NotImplementedError)", () => {
    const llamacpp = parseUpstreamError(JSON.stringify({ error: { code: 501, message: "This server does not support embeddings. Start it with `--embeddings`", type: "not_supported_error" } }));
    expect(classifyStatus(501, true, llamacpp)).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    const vllm = parseUpstreamError(JSON.stringify({ error: { message: "Only 'auto' tool_choice is supported in response API with Harmony", type: "NotImplementedError", param: null, code: 501 } }));
    expect(classifyStatus(501, true, vllm)).toEqual({ kind: "backend-failure", why: "server-error" });
  });

  it("naming another parameter (vLLM's unknown previous_response_id: response_id) is the request's", () => {
    expect(classifyStatus(404, true, said("response_id"), null, null, null, "resp_gone")).toEqual({ kind: "rejected", notHeld: true });
    // Of a request that refers to no stored response (chat, embeddings, a Responses request without
    // previous_response_id) it is the request's all the same, but says nothing of a stored response
    // another backend holds: the answer the client gets, not the failure before it.
    expect(classifyStatus(404, true, said("response_id"))).toEqual({ kind: "rejected" });
  });

  it("naming the stored response the request refers to, with no param (other vLLM versions), is the request's", () => {
    const unnamed = parseUpstreamError('{"object":"error","message":"Response with id \'resp_gone\' not found.","type":"invalid_request_error","param":null,"code":404}');
    expect(classifyStatus(404, true, unnamed, null, null, null, "resp_gone")).toEqual({ kind: "rejected", notHeld: true });
    // The same answer to a request that refers to no stored response, or to another one, says nothing of the request.
    expect(classifyStatus(404, true, unnamed)).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    expect(classifyStatus(404, true, unnamed, null, null, null, "resp_other")).toEqual({ kind: "backend-failure", why: "no-endpoint" });
    // A model the backend does not serve, asked for by a request that refers to a response: the backend's.
    const model = parseUpstreamError('{"object":"error","message":"The model `m` does not exist.","type":"NotFoundError","param":null,"code":404}');
    expect(classifyStatus(404, true, model, null, null, null, "resp_gone")).toEqual({ kind: "backend-failure", why: "not-served" });
  });
});

describe("a 500 that says the request's input is too large for the engine (review of failover)", () => {
  const error = (message: string, code = 500) => parseUpstreamError(JSON.stringify({ error: { code, message, type: "server_error" } }));
  const TOO_LARGE = [
    // llama.cpp's server today, and before it gave the counts (an embeddings or rerank input over its ubatch).
    "input (3926 tokens) is too large to process. increase the physical batch size (current batch size: 512)",
    "input is too large to process. increase the physical batch size",
    // llama-box's.
    "input is too large to process, please increase the physical batch size",
    // llama.cpp's, an input over a slot's context (a 500 until it became exceed_context_size_error).
    "input is larger than the max context size. skipping",
    // vLLM's and SGLang's, passed on by a server wrapping them with a 500.
    "[address=0.0.0.0:43769, pid=1065] The decoder prompt (length 66501) is longer than the maximum model length of 65536. Make sure that `max_model_len` is no smaller than the number of text tokens.",
    "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (9000 in the messages, 0 in the completion).",
    "The input (150000 tokens) is longer than the model's context length (128000 tokens).",
  ];

  it.each(TOO_LARGE)("is the request's: %s", (message) => {
    expect(classifyStatus(500, true, error(message))).toEqual({ kind: "rejected", tooLarge: true });
  });

  it("FastAPI's {detail} says it as well as an OpenAI-style error", () => {
    expect(classifyStatus(500, true, parseUpstreamError(JSON.stringify({ detail: TOO_LARGE[4] })))).toEqual({ kind: "rejected", tooLarge: true });
  });

  it("nothing else is excused: another 5xx saying the same (a proxy's 502, 503, 504), a page, the server's own state, another failure", () => {
    const failed = { kind: "backend-failure", why: "server-error" };
    for (const status of [502, 503, 504]) expect([status, classifyStatus(status, true, error(TOO_LARGE[0] as string, status))]).toEqual([status, failed]);
    // Words in a page are never read.
    expect(classifyStatus(500, true, null, null, "text/html")).toEqual(failed);
    // A KV cache full of every request in flight is the server's state, not the request's size.
    expect(classifyStatus(500, true, error("Input prompt is too big compared to KV size. Please try increasing KV size."))).toEqual(failed);
    expect(classifyStatus(500, true, error("decoding exceeds the available context size. try increasing the context size."))).toEqual(failed);
    expect(classifyStatus(500, true, error("CUDA out of memory. Tried to allocate 2.00 GiB"))).toEqual(failed);
    // Nor in a field other than the message.
    expect(classifyStatus(500, true, parseUpstreamError(JSON.stringify({ error: { message: "boom", type: "server_error", hint: TOO_LARGE[0] } })))).toEqual(failed);
  });

  it("a stream's error event saying so with its code 500 is judged alike", () => {
    expect(streamErrorAnswer(error(TOO_LARGE[0] as string), null)).toEqual({ status: 500, answer: { kind: "rejected", tooLarge: true } });
  });

  it("reaches the client as OpenAI answers an input over the model's context: a 400 invalid_request_error context_length_exceeded in the engine's words, not to be retried", () => {
    const said = parseUpstreamError(JSON.stringify({ error: { code: 500, message: TOO_LARGE[0], type: "server_error", n_prompt_tokens: 3926 } }));
    const e = clientError(500, { kind: "rejected", tooLarge: true }, said, backendAsSeen({ id: "gpu-a" }, { name: "g" }, true), null);
    expect([e.status, e.headers]).toEqual([400, { "x-should-retry": "false" }]);
    expect(e.body()).toEqual({ error: { message: TOO_LARGE[0], type: "invalid_request_error", code: "context_length_exceeded", param: null, n_prompt_tokens: 3926 } });
  });
});

describe("what the client is told", () => {
  /** How the master key's errors name backend gpu-a of group g. */
  const OWNER_SEES = backendAsSeen({ id: "gpu-a" }, { name: "g" }, true);
  const llama = parseUpstreamError(JSON.stringify({ error: { code: 400, message: "the request exceeds the available context size", type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 } }));

  it("a rejection keeps the upstream's status, type, code, param and extra fields", () => {
    const e = clientError(400, { kind: "rejected" }, llama, OWNER_SEES, null);
    expect(e.status).toBe(400);
    expect(e.body()).toEqual({ error: { message: "the request exceeds the available context size", type: "exceed_context_size_error", code: 400, param: null, n_prompt_tokens: 5000, n_ctx: 4096 } });
  });

  it("a rejection without JSON names the backend", () => {
    const e = clientError(422, { kind: "rejected" }, null, OWNER_SEES, null);
    expect(e.body().error).toMatchObject({ message: "backend gpu-a rejected the request (HTTP 422)", type: "invalid_request_error", code: "upstream_rejected" });
  });

  it("a virtual key is told the backend's group, not which backend: its id is the master key's", () => {
    const e = clientError(422, { kind: "rejected" }, null, backendAsSeen({ id: "gpu-a" }, { name: "g" }, false), null);
    expect(e.message).toBe("a backend of group g rejected the request (HTTP 422)");
  });

  it("a backend failure is a 502 with the upstream's JSON message, or a generic one", () => {
    const said = parseUpstreamError('{"object":"error","message":"CUDA out of memory","type":"InternalServerError","code":500}');
    expect(clientError(500, { kind: "backend-failure", why: "server-error" }, said, OWNER_SEES, null).body().error).toMatchObject({ message: "backend gpu-a failed (HTTP 500): CUDA out of memory", type: "upstream_error", code: "upstream_error" });
    const e = clientError(500, { kind: "backend-failure", why: "server-error" }, null, OWNER_SEES, null);
    expect(e.status).toBe(502);
    expect(e.message).toBe("backend gpu-a failed (HTTP 500)");
  });

  it("what an upstream says about the gateway's credentials stays with the gateway", () => {
    const said = parseUpstreamError('{"error":{"message":"key sk-abc is revoked"}}');
    const e = clientError(401, { kind: "backend-failure", why: "credentials" }, said, OWNER_SEES, null);
    expect(e.message).not.toContain("sk-abc");
    expect(e.code).toBe("upstream_auth_error");
    // The engine's own refusal of the gateway's key: a backend's failure, which the SDKs retry (another backend may hold the right key).
    expect([e.status, e.headers]).toEqual([502, undefined]);
  });

  it("a proxy's 403 reaches the client only when no backend of its group served the request (the request's): its status, not to be retried", () => {
    const e = clientError(403, { kind: "backend-failure", why: "refused" }, null, OWNER_SEES, null);
    expect([e.status, e.headers]).toEqual([403, { "x-should-retry": "false" }]);
    expect(e.message).toBe("backend gpu-a refused the request (HTTP 403): a proxy in front of its server refused what the request holds, or the gateway's access token");
  });

  it("a 429's and a 503's Retry-After are passed on", () => {
    expect(clientError(429, { kind: "rate-limited" }, null, OWNER_SEES, "30").headers).toEqual({ "retry-after": "30" });
    expect(clientError(503, { kind: "backend-failure", why: "server-error" }, null, OWNER_SEES, "5").headers).toEqual({ "retry-after": "5" });
    expect(clientError(500, { kind: "backend-failure", why: "server-error" }, null, OWNER_SEES, "5").headers).toBeUndefined();
  });
});

describe("reading an upstream's error body", () => {
  it.each([
    ["OpenAI", '{"error":{"message":"bad","type":"invalid_request_error","param":"messages","code":"x"}}', { message: "bad", type: "invalid_request_error", param: "messages", code: "x" }],
    ["vLLM", '{"object":"error","message":"The model `m` does not exist.","type":"NotFoundError","param":null,"code":404}', { message: "The model `m` does not exist.", type: "NotFoundError", code: 404 }],
    ["TGI", '{"error":"Input validation error","error_type":"validation"}', { message: "Input validation error", type: "validation" }],
    ["FastAPI", '{"detail":"Not Found"}', { message: "Not Found" }],
    ["FastAPI validation", '{"detail":[{"loc":["body"],"msg":"field required","type":"missing"}]}', { message: "field required" }],
  ])("%s", (_name, body, expected) => {
    expect(parseUpstreamError(body)).toMatchObject(expected);
  });

  it.each(["<html>Traceback</html>", "Internal Server Error", "", "[1,2]", '"text"', "{}", '{"foo":1}'])("no JSON error in %j", (body) => {
    expect(parseUpstreamError(body)).toBeNull();
  });

  it("bounds the message and the extra fields", () => {
    const extra = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`f${i}`, "v".repeat(500)]));
    const e = parseUpstreamError(JSON.stringify({ error: { message: "m".repeat(10_000), nested: { a: 1 }, ...extra } }));
    expect(e?.message).toHaveLength(1000);
    expect(Object.keys(e?.extra ?? {})).toHaveLength(8);
    for (const v of Object.values(e?.extra ?? {})) expect(String(v).length).toBeLessThanOrEqual(200);
    expect(e?.extra).not.toHaveProperty("nested");
  });
});

describe("reading an error body cut at the gateway's bound", () => {
  const whole = JSON.stringify({ error: { message: `Value error, bad field \u00e9 "quoted" ${"x".repeat(40)}`, type: "Bad Request", param: null, code: 400 } });

  it("keeps what came whole and the message up to the cut, wherever the cut falls", () => {
    for (let at = whole.indexOf("Value") + 1; at <= whole.length; at++) {
      const e = parseUpstreamError(whole.slice(0, at));
      expect(e?.message, whole.slice(0, at)).toBeTypeOf("string");
      expect("Value error, bad field \u00e9 \"quoted\" ".concat("x".repeat(40))).toContain(e?.message ?? "");
      if (at > whole.indexOf('"param"')) expect(e?.type).toBe("Bad Request");
    }
  });

  it("drops a key or a number the cut fell in", () => {
    expect(parseUpstreamError('{"error":{"message":"m","type":"t","co')).toMatchObject({ message: "m", type: "t", code: null });
    expect(parseUpstreamError('{"error":{"message":"m","code":40')).toMatchObject({ message: "m", code: null });
    // Cut after its integer part or its exponent's sign: still unfinished (40.5, 1e3 cut short).
    expect(parseUpstreamError('{"error":{"message":"m","code":40.')).toMatchObject({ message: "m", code: null });
    expect(parseUpstreamError('{"error":{"message":"m","code":1e')).toMatchObject({ message: "m", code: null });
    expect(parseUpstreamError('{"error":{"message":"m","code":-')).toMatchObject({ message: "m", code: null });
    expect(parseUpstreamError('{"error":{"message":"m","param":nu')).toMatchObject({ message: "m", param: null });
  });

  it("an escape the cut fell in is dropped, an escaped backslash kept", () => {
    expect(parseUpstreamError('{"message":"a\\u00')?.message).toBe("a");
    expect(parseUpstreamError('{"message":"a\\')?.message).toBe("a");
    expect(parseUpstreamError('{"message":"a\\\\')?.message).toBe("a\\");
  });

  it("no secret, nor the part of one the cut left, reaches the message", () => {
    const secret = "sk-gpu-0123456789abcdef";
    for (let at = 1; at <= secret.length; at++) {
      const e = parseUpstreamError(`{"error":{"message":"key ${secret} refused, echoing ${secret.slice(0, at)}`, [secret]);
      expect(e?.message).toBe("key [redacted] refused, echoing ".concat(at === secret.length ? "[redacted]" : ""));
    }
  });

  it.each(["<html>Traceback", "Internal Server Error {", "{oops", '{"message"'])("no JSON error in %j", (body) => {
    expect(parseUpstreamError(body)).toBeNull();
  });
});

describe("the retry decision", () => {
  const policy: RetryPolicy = { maxAttempts: 3, on: ["connect", "timeout", "5xx", "429"], backoffMs: 20, backoffMaxMs: 500, retryAfterCapMs: 2000 };
  const half = () => 0.5;

  it.each([
    ["a 5xx on the first attempt", 1, { cause: "5xx" as const, retryAfterMs: null }, Infinity, { retry: true, waitMs: 10 }],
    ["attempts spent", 3, { cause: "5xx" as const, retryAfterMs: null }, Infinity, { retry: false }],
    ["a short Retry-After is waited for", 1, { cause: "429" as const, retryAfterMs: 50 }, Infinity, { retry: true, waitMs: 50 }],
    ["a long Retry-After is not waited for: the next backend is asked at once", 1, { cause: "429" as const, retryAfterMs: 30_000 }, Infinity, { retry: true, waitMs: 0 }],
    ["a wait that would outlast the deadline is not made: the next backend is asked at once", 1, { cause: "429" as const, retryAfterMs: 500 }, 400, { retry: true, waitMs: 0 }],
    ["a backoff that would outlast the deadline is not made either", 1, { cause: "5xx" as const, retryAfterMs: null }, 5, { retry: true, waitMs: 0 }],
    ["the deadline passed", 1, { cause: "5xx" as const, retryAfterMs: null }, 0, { retry: false }],
  ])("%s", (_name, attempts, failure, msLeft, expected) => {
    expect(nextStep(policy, attempts, failure, msLeft, half)).toEqual(expected);
  });

  it("a cause the group does not retry is not retried", () => {
    expect(nextStep({ ...policy, on: ["connect"] }, 1, { cause: "5xx", retryAfterMs: null }, Infinity, half)).toEqual({ retry: false });
  });

  it("backs off with full jitter, doubling to the cap", () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => backoff(20, 500, n, () => 1))).toEqual([20, 40, 80, 160, 320, 500]);
    expect(backoff(20, 500, 3, () => 0)).toBe(0);
  });

  it.each([
    ["5", 5000],
    ["0", 0],
    ["1.5", 1500],
    ["-1", null],
    ["soon", null],
    ["", null],
  ])("Retry-After %j", (value, ms) => {
    expect(parseRetryAfter(value)).toBe(ms);
  });

  it("Retry-After as an HTTP date", () => {
    const now = Date.parse("2026-11-23T10:00:00Z");
    expect(parseRetryAfter("Mon, 23 Nov 2026 10:00:30 GMT", now)).toBe(30_000);
    expect(parseRetryAfter("Mon, 23 Nov 2026 09:00:00 GMT", now)).toBe(0);
  });

  it("only a server-side failure may follow the request, and none that is the backend's own", () => {
    expect((["connect", "timeout", "5xx", "429"] as const).filter((cause) => isServerSide({ cause, retryAfterMs: null }))).toEqual(["timeout", "5xx"]);
    expect(isServerSide({ cause: "5xx", retryAfterMs: null, backendsOwn: true })).toBe(false);
    expect((["server-error", "status", "unavailable", "redirect", "no-content", "not-served", "no-endpoint", "credentials", "refused"] as const).filter((why) => !isBackendsOwn(why))).toEqual(["server-error", "status", "no-endpoint", "refused"]);
  });
});
