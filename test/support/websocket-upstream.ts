import http from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, type RawData, type WebSocket } from "ws";

/**
 * A realtime upstream for what the fleet simulator does not do, one behaviour per deployment: a
 * deployment's baseUrl is `<url>/<behaviour>`, so the gateway's handshake lands on
 * `/<behaviour>/v1/realtime`.
 * - `echo`: accepts; sends every message back as it came (text as text, binary as binary); the
 *   text message `cut` makes it drop the connection without a close frame, as a crashed server
 *   does, and `as-binary:<text>` is sent back as a binary message of <text>'s bytes. Each session's close code and reason, as the upstream received them, are recorded.
 * - `speaches`: as `echo`, after opening the session with Speaches' session.created, which
 *   announces the models it runs the session on (its defaults: a whisper model transcribes,
 *   Kokoro speaks; in a transcription session, the handshake's `transcription_model` or `model`
 *   transcribes); a `session.update` whose transcription object (Speaches' layout) names no model
 *   is refused with an `invalid_request_error` event, as Speaches' validation refuses it, not echoed.
 * - `speaches-late`: as `speaches`, its session.created after another event (a rate_limits.updated).
 * - `mute`: accepts, takes every message and answers none, as an engine that hung after the
 *   upgrade does; its close is recorded as `echo`'s is.
 * - `slow:<ms>`: as `echo`, after holding the handshake unanswered for that long (handshakes
 *   still waiting are counted: `waiting()`). A handshake whose connection the gateway closes
 *   meanwhile is dropped, as a server's HTTP layer drops it: its socket is read, so the gateway's
 *   FIN is seen (a socket nobody reads stays half-open on this side, whatever the gateway did).
 * - `refuse:<status>`: answers the handshake with that status and an OpenAI-style error (with
 *   Retry-After: 30 on a 429 or 503), never switching protocols.
 * - `no-route`: an ASGI server (vLLM's uvicorn) with no WebSocket route at the path: the app closes
 *   the connection before accepting it, which the ASGI spec makes an HTTP 403 with no body.
 * - `nginx-400`: nginx in front of the engine answering with its own 400 page (text/html), as it
 *   does to plain HTTP sent to its HTTPS port, whatever the handshake holds.
 * - `access`: a server behind Cloudflare Access: as `echo` when the handshake carries
 *   `CF-Access-Client-Secret: <accessSecret>`, Access's 403 page otherwise.
 * - `crash:<word>`: as `echo`, but a handshake whose query holds the word gets a 500, as from a
 *   server that crashes on what the session asks for.
 * - `close:<code>`: accepts, then closes at once with that code, sending nothing; the reason
 *   echoes the handshake's Authorization header, as a careless server's "bad key …" does.
 * - `close-garbled:<code>`: the same, its reason 100 bytes that are not UTF-8 (0xff each), as a
 *   server that cuts a reason inside a character, or writes it in another encoding, sends.
 * - `vllm`: a vLLM serving realtime transcription of the model `upstream-rt` (every deployment's
 *   model here): accepts, sends `{"type":"session.created",…}` at once; reads no query string, as
 *   vLLM's /v1/realtime does not, and wants the model named in a `session.update`'s top-level
 *   `model` first: one naming another model gets an `error` `model_not_found`, and until one names
 *   its own a commit gets an `error` `model_not_validated` (vLLM's realtime/connection.py). Then it
 *   takes `input_audio_buffer.append` events without a word, as vLLM does, and answers an
 *   `input_audio_buffer.commit` with a `transcription.delta` and a `transcription.done`. The
 *   models its session.updates named are recorded (`updates()`); its close as `echo`'s is.
 * - `vllm-stream`: vLLM's streaming transcription as its client meets it: as `vllm` (a
 *   session.update naming its model first), but a commit starts a transcription whose deltas come
 *   as the audio does, a `transcription.delta` for each append after it, and only a commit with
 *   `final: true` ends it, with a `transcription.done` (1 prompt token, a completion token a delta).
 *   A binary message ends the session as it ends vLLM's, which reads with Starlette's
 *   receive_text(): closed 1000, the transcription cut short with no `done`. `vllm-stream:<n>`
 *   also ends it so after its n-th delta (a server that ends the session of its own accord);
 *   `vllm-stream:<n>:<code>` closes it with that code instead (1012: uvicorn restarting vLLM).
 * - `vllm-early`: as `vllm` (a session.update naming its model first), but its transcription.done reports zeros, as an early vLLM's did (a TODO).
 * - `vllm-omni`: vLLM-Omni serving realtime transcription with speech (its realtime_connection.py):
 *   as `vllm` (a session.update naming its model first), but a commit's transcription comes as three `transcription.delta`s, each followed by
 *   a `response.audio.delta` (an audio chunk), then `transcription.done` with its usage (40 prompt,
 *   3 completion tokens) and `response.audio.done` — no `response.created` or `response.done`.
 * - `omni-duplex`: vLLM-Omni's full-duplex server (OpenAIFullDuplexConnection), which sends the
 *   OpenAI SDK's event models serialised in field order, `type` last (after a nested object's own
 *   `type`, or a delta's base64): accepts, sends `session.created`, and answers a `response.create`
 *   with `response.created`, three `response.output_audio.delta`s and a `response.done` whose usage
 *   is 10 input and 4 output tokens.
 * - `no-usage`: a realtime server whose `response.done` carries no usage (`"usage": null`), as
 *   Speaches' does: accepts, sends `session.created`, and answers a `response.create` with
 *   `response.created`, five `response.text.delta`s and a `response.done` with `usage: null`.
 * - `vllm-hung`: a vLLM whose engine hung behind its live HTTP server: accepts, sends
 *   `{"type":"session.created",…}` at once, as vLLM's server does before it asks the engine
 *   anything, then answers nothing; its chat completions are never answered either. Its close is
 *   recorded as `echo`'s is.
 * - `acks-hung`: an OpenAI-style server whose engine hung: accepts, sends `session.created`, and
 *   acknowledges what it is asked as its server layer does without the engine — an
 *   `input_audio_buffer.commit` with `input_audio_buffer.committed`, a `response.create` with
 *   `response.created` — then says nothing more. Its close is recorded as `echo`'s is.
 * A plain POST to `<behaviour>/v1/chat/completions` gets a one-word chat completion (but for
 * `vllm-hung`), so a test can tell whether chat still reaches a backend; a GET of `<behaviour>/health` says ok (a hung engine's
 * does too), counted per behaviour as written (`slow:60000`).
 */
export interface WebSocketUpstream {
  url: string;
  /** The close frames the `echo` behaviour received, oldest first (code 1005: none). */
  closes(): { code: number; reason: string }[];
  /** Sessions of `echo` (and `speaches`, `slow`, `mute`, the `vllm`s, `omni-duplex`, `no-usage`, `acks-hung`) still open. */
  open(): number;
  /** Handshakes `slow` holds unanswered, their connection still open. */
  waiting(): number;
  /** The top-level `model` of each `session.update` the `vllm`s received, oldest first (null: none named). */
  updates(): (string | null)[];
  /** Health probes of `behaviour` (as written in the baseUrl: `slow:60000`). */
  health(behaviour: string): number;
  /** The query string (`?…`, or "") of each realtime handshake that reached this upstream, oldest first. */
  queries(): string[];
  close(): Promise<void>;
}

export interface WebSocketUpstreamOptions {
  /** The Access service token's secret `access` wants. */
  accessSecret?: string;
}

export async function startWebSocketUpstream(o: WebSocketUpstreamOptions = {}): Promise<WebSocketUpstream> {
  const closes: { code: number; reason: string }[] = [];
  const updates: (string | null)[] = [];
  const wss = new WebSocketServer({ noServer: true });
  const held = new Set<Duplex>();
  const probes = new Map<string, number>();
  const queries: string[] = [];
  const server = http.createServer((req, res) => {
    const probed = /^\/([^/]+)\/health$/.exec(req.url ?? "");
    if (req.method !== "GET" || !probed) return chat(req, res);
    const behaviour = decodeURIComponent(probed[1] as string);
    probes.set(behaviour, (probes.get(behaviour) ?? 0) + 1);
    res.writeHead(200, { "content-type": "application/json" }).end('{"status":"ok"}');
  });
  server.on("upgrade", (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    const m = /^\/([^/:]+)(?::([^/]+))?\/v1\/realtime(\?.*)?$/.exec(req.url ?? "");
    if (m) queries.push(m[3] ?? "");
    const accept = () => wss.handleUpgrade(req, socket, head, (ws) => echo(ws, closes));
    if (m?.[1] === "echo") return accept();
    if (m?.[1] === "speaches" || m?.[1] === "speaches-late") {
      return void wss.handleUpgrade(req, socket, head, (ws) => {
        recordClose(ws, closes);
        if (m[1] === "speaches-late") ws.send(JSON.stringify({ type: "rate_limits.updated", event_id: "event_limits", rate_limits: [] }));
        ws.send(JSON.stringify({ type: "session.created", event_id: "event_created", session: speachesSession(new URLSearchParams(m[3] ?? "")) }));
        ws.on("message", (data, isBinary) => (isBinary ? ws.send(data, { binary: true }) : echoUnlessRefused(ws, data.toString())));
      });
    }
    if (m?.[1] === "mute") return void wss.handleUpgrade(req, socket, head, (ws) => recordClose(ws, closes));
    if (m?.[1] === "acks-hung") {
      return void wss.handleUpgrade(req, socket, head, (ws) => {
        recordClose(ws, closes);
        ws.send(JSON.stringify({ type: "session.created", session: {} }));
        ws.on("message", (data) => acknowledge(ws, data.toString()));
      });
    }
    if (m?.[1] === "vllm" || m?.[1] === "vllm-hung" || m?.[1] === "vllm-omni" || m?.[1] === "vllm-early") {
      const hung = m[1] === "vllm-hung";
      const answer = m[1] === "vllm-omni" ? transcribeAndSpeak : m[1] === "vllm-early" ? transcribeCountingNothing : transcribe;
      return void wss.handleUpgrade(req, socket, head, (ws) => {
        recordClose(ws, closes);
        ws.send(JSON.stringify({ type: "session.created", id: `sess-${Math.random().toString(36).slice(2)}`, created: Math.floor(Date.now() / 1000) }));
        if (!hung) ws.on("message", servedAs(ws, updates, answer));
      });
    }
    if (m?.[1] === "vllm-stream") {
      const [after, code] = (m[2] ?? "").split(":");
      const endAfter = after ? Number(after) : Infinity;
      return void wss.handleUpgrade(req, socket, head, (ws) => {
        recordClose(ws, closes);
        ws.send(JSON.stringify({ type: "session.created", id: "sess-stream" }));
        const served = servedAs(ws, updates, streamTranscription(ws, endAfter, code ? Number(code) : 1000));
        ws.on("message", (data, isBinary) => (isBinary ? ws.close(1000) : served(data)));
      });
    }
    if (m?.[1] === "omni-duplex") {
      return void wss.handleUpgrade(req, socket, head, (ws) => {
        recordClose(ws, closes);
        ws.send(typeLast("session.created", { session: { audio: { input: { format: { rate: 24000, type: "audio/pcm" } } }, id: "sess-1", object: "realtime.session", type: "realtime" } }));
        ws.on("message", (data) => respondTypeLast(ws, data.toString()));
      });
    }
    if (m?.[1] === "no-usage") {
      return void wss.handleUpgrade(req, socket, head, (ws) => {
        recordClose(ws, closes);
        ws.send(JSON.stringify({ type: "session.created", session: {} }));
        ws.on("message", (data) => respondWithoutUsage(ws, data.toString()));
      });
    }
    if (m?.[1] === "no-route") return void socket.end("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    if (m?.[1] === "nginx-400") {
      const page = "<html>\r\n<head><title>400 The plain HTTP request was sent to HTTPS port</title></head>\r\n<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";
      return void socket.end(`HTTP/1.1 400 Bad Request\r\ncontent-type: text/html\r\ncontent-length: ${Buffer.byteLength(page)}\r\nconnection: close\r\n\r\n${page}`);
    }
    if (m?.[1] === "access") {
      if (o.accessSecret !== undefined && req.headers["cf-access-client-secret"] === o.accessSecret) return accept();
      return void socket.end("HTTP/1.1 403 Forbidden\r\ncontent-type: text/html\r\ncontent-length: 9\r\nconnection: close\r\n\r\nForbidden");
    }
    if (m?.[1] === "close") {
      const reason = `refused: ${req.headers.authorization ?? "no key"}`.slice(0, 123);
      return void wss.handleUpgrade(req, socket, head, (ws) => ws.close(Number(m[2]), reason));
    }
    if (m?.[1] === "close-garbled") {
      return void wss.handleUpgrade(req, socket, head, (ws) => {
        // The runtime answers the close with the reason's bytes as they came, which ws refuses as
        // not UTF-8: an error on this socket, that was closing anyway, and no test's concern.
        ws.on("error", () => {});
        ws.close(Number(m[2]), Buffer.alloc(100, 0xff));
      });
    }
    if (m?.[1] === "crash" && !decodeURIComponent(m[3] ?? "").includes(m[2] ?? "")) return accept();
    if (m?.[1] === "slow") {
      held.add(socket);
      socket.once("close", () => held.delete(socket));
      // The client sends nothing before the 101: what comes now is only the end of its connection.
      socket.once("end", () => socket.destroy());
      socket.resume();
      const timer = setTimeout(() => {
        held.delete(socket);
        if (!socket.destroyed) wss.handleUpgrade(req, socket, head, (ws) => echo(ws, closes));
      }, Number(m[2] ?? 5000));
      return void socket.once("close", () => clearTimeout(timer));
    }
    const status = m?.[1] === "refuse" ? Number(m[2]) : m?.[1] === "crash" ? 500 : 404;
    const body = JSON.stringify({ error: { message: `refused with ${status}`, type: status === 429 ? "rate_limit_error" : "invalid_request_error", param: null, code: `refused_${status}` } });
    const retry = status === 429 || status === 503 ? "retry-after: 30\r\n" : "";
    socket.end(`HTTP/1.1 ${status} Refused\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${retry}connection: close\r\n\r\n${body}`);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    closes: () => [...closes],
    updates: () => [...updates],
    queries: () => [...queries],
    open: () => wss.clients.size,
    waiting: () => held.size,
    health: (behaviour) => probes.get(behaviour) ?? 0,
    close: () =>
      new Promise<void>((resolve) => {
        for (const ws of wss.clients) ws.terminate();
        for (const socket of held) socket.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function echo(ws: WebSocket, closes: { code: number; reason: string }[]): void {
  ws.on("message", (data, isBinary) => {
    if (!isBinary && data.toString() === "cut") return ws.terminate();
    if (!isBinary && data.toString().startsWith("as-binary:")) return ws.send(Buffer.from(data.toString().slice("as-binary:".length)), { binary: true });
    ws.send(data, { binary: isBinary });
  });
  recordClose(ws, closes);
}

/** Speaches' default transcription model in a conversation, as its session.created announces it. */
export const SPEACHES_TRANSCRIPTION_MODEL = "Systran/faster-distil-whisper-small.en";
/** Speaches' speech model, as its session.created announces it. */
export const SPEACHES_SPEECH_MODEL = "speaches-ai/Kokoro-82M-v1.0-ONNX";

/** The session Speaches opens for a handshake's `query` (its create_session_object_configuration), as its session.created says. */
function speachesSession(query: URLSearchParams): Record<string, unknown> {
  const transcribing = query.getAll("intent").at(-1) === "transcription";
  const model = query.get("model") ?? "";
  const transcriptionModel = query.get("transcription_model") ?? (transcribing ? model : SPEACHES_TRANSCRIPTION_MODEL);
  return {
    id: "sess_speaches",
    model: transcribing ? "gpt-4o-realtime-preview" : model,
    modalities: ["audio", "text"],
    instructions: "Your knowledge cutoff is 2023-10.",
    speech_model: SPEACHES_SPEECH_MODEL,
    voice: "af_heart",
    input_audio_format: "pcm16",
    output_audio_format: "pcm16",
    input_audio_transcription: { model: transcriptionModel, language: null },
    turn_detection: { type: "server_vad", threshold: 0.9, prefix_padding_ms: 0, silence_duration_ms: 550, create_response: !transcribing },
    temperature: 0.8,
    tools: [],
    tool_choice: "auto",
    max_response_output_tokens: "inf",
  };
}

/** `message` sent back, unless Speaches' validation refuses it (namesNoTranscriptionModel). */
function echoUnlessRefused(ws: WebSocket, message: string): void {
  if (!namesNoTranscriptionModel(message)) return ws.send(message);
  const error = { type: "invalid_request_error", code: null, param: null, message: "1 validation error for SessionUpdateEvent\nsession.input_audio_transcription.model\n  Field required" };
  ws.send(JSON.stringify({ type: "error", event_id: "event_refused", error }));
}

/** Whether `message` is a session.update whose input_audio_transcription names no model (Speaches requires its `model`). */
function namesNoTranscriptionModel(message: string): boolean {
  let event: { type?: unknown; session?: { input_audio_transcription?: { model?: unknown } | null } } | null;
  try {
    event = JSON.parse(message) as typeof event;
  } catch {
    return false;
  }
  const transcription = event?.type === "session.update" ? event.session?.input_audio_transcription : undefined;
  return typeof transcription === "object" && transcription !== null && typeof transcription.model !== "string";
}

/** The model vLLM serves in every `vllm` behaviour: each deployment's `model` in the tests. */
const SERVED_MODEL = "upstream-rt";

/**
 * vLLM's realtime connection (realtime/connection.py) before its answer to a commit: a
 * `session.update` validates the session when its top-level `model` is one the server serves (an
 * error `model_not_found` otherwise), and a commit before that gets an error `model_not_validated`;
 * what a validated session is sent goes to `answer`.
 */
function servedAs(ws: WebSocket, updates: (string | null)[], answer: (ws: WebSocket, message: string) => void): (data: RawData) => void {
  let validated = false;
  const error = (code: string, message: string) => ws.send(JSON.stringify({ type: "error", error: message, code }));
  return (data) => {
    const message = data.toString();
    let event: { type?: unknown; model?: unknown };
    try {
      event = JSON.parse(message) as typeof event;
    } catch {
      return error("invalid_json", "Invalid JSON");
    }
    if (event.type === "session.update") {
      const model = typeof event.model === "string" ? event.model : null;
      updates.push(model);
      if (model === SERVED_MODEL) validated = true;
      else error("model_not_found", `The model \`${model}\` does not exist.`);
    } else if (event.type === "input_audio_buffer.commit" && !validated) {
      error("model_not_validated", "Model not validated. Make sure to validate the model by sending a session.update event.");
    } else answer(ws, message);
  };
}

/** vLLM's realtime transcription, in its minimal form: a commit is answered, an append is not. */
function transcribe(ws: WebSocket, message: string, usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }): void {
  if (!message.includes('"input_audio_buffer.commit"')) return;
  ws.send(JSON.stringify({ type: "transcription.delta", delta: "heard" }));
  ws.send(JSON.stringify({ type: "transcription.done", text: "heard", usage }));
}

/** vLLM's streaming transcription (`vllm-stream`): a delta per append once a commit began it, its done at a final commit; closed with `endCode` after `endAfter` deltas. */
function streamTranscription(ws: WebSocket, endAfter: number, endCode: number): (ws: WebSocket, message: string) => void {
  let started = false;
  let deltas = 0;
  return (_ws, message) => {
    const event = JSON.parse(message) as { type?: unknown; final?: unknown };
    if (event.type === "input_audio_buffer.commit" && event.final !== true) started = true;
    else if (event.type === "input_audio_buffer.commit" && started) {
      ws.send(JSON.stringify({ type: "transcription.done", text: "w".repeat(deltas), usage: { prompt_tokens: 1, completion_tokens: deltas, total_tokens: 1 + deltas } }));
      started = false;
      deltas = 0;
    } else if (event.type === "input_audio_buffer.append" && started) {
      ws.send(JSON.stringify({ type: "transcription.delta", delta: "w" }));
      if (++deltas >= endAfter) ws.close(endCode);
    }
  };
}

/** An early vLLM's: its transcription.done's usage all zeros. */
function transcribeCountingNothing(ws: WebSocket, message: string): void {
  transcribe(ws, message, { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
}

/** vLLM-Omni's realtime transcription with speech: each text delta's audio chunk as a `response.audio.delta`, the generation's usage in its transcription.done. */
function transcribeAndSpeak(ws: WebSocket, message: string): void {
  if (!message.includes('"input_audio_buffer.commit"')) return;
  for (let i = 0; i < 3; i++) {
    ws.send(JSON.stringify({ type: "transcription.delta", delta: "w" }));
    ws.send(JSON.stringify({ type: "response.audio.delta", audio: Buffer.alloc(960).toString("base64"), format: "pcm16", sample_rate_hz: 24000 }));
  }
  ws.send(JSON.stringify({ type: "transcription.done", text: "www", usage: { prompt_tokens: 40, completion_tokens: 3, total_tokens: 43 } }));
  ws.send(JSON.stringify({ type: "response.audio.done", has_audio: true }));
}

/** An event as the OpenAI Python SDK's models dump it: its fields in order, `type` last. */
const typeLast = (type: string, fields: Record<string, unknown>) => JSON.stringify({ event_id: `evt_${Math.random().toString(36).slice(2)}`, ...fields, type });

/** vLLM-Omni's full-duplex answer to a response.create, every event `type` last. */
function respondTypeLast(ws: WebSocket, message: string): void {
  if (!message.includes('"response.create"')) return;
  const response = { id: "resp_1", object: "realtime.response", output: [] as unknown[], status: "in_progress" };
  ws.send(typeLast("response.created", { response }));
  for (let i = 0; i < 3; i++) {
    ws.send(JSON.stringify({ content_index: 0, delta: Buffer.alloc(960).toString("base64"), event_id: `evt_${i}`, item_id: "item_1", output_index: 0, response_id: "resp_1", type: "response.output_audio.delta" }));
  }
  const output = [{ id: "item_1", content: [{ transcript: "hi", type: "output_audio" }], role: "assistant", status: "completed", type: "message" }];
  ws.send(typeLast("response.done", { response: { ...response, output, status: "completed", usage: { input_tokens: 10, output_tokens: 4, total_tokens: 14 } } }));
}

/** Speaches' answer to a response.create (its ResponseHandler never sets the response's usage): five text deltas, then a response.done whose usage is null. */
function respondWithoutUsage(ws: WebSocket, message: string): void {
  if (!message.includes('"response.create"')) return;
  const response = { id: `resp_${Math.random().toString(36).slice(2)}`, object: "realtime.response", status: "in_progress", output: [] as unknown[], modalities: ["text"] };
  ws.send(JSON.stringify({ type: "response.created", response }));
  for (let i = 0; i < 5; i++) ws.send(JSON.stringify({ type: "response.text.delta", response_id: response.id, item_id: "item_1", output_index: 0, content_index: 0, delta: "w" }));
  ws.send(JSON.stringify({ type: "response.done", response: { ...response, status: "completed", usage: null } }));
}

/** What an OpenAI-style server layer answers to a request before its engine makes anything. */
function acknowledge(ws: WebSocket, message: string): void {
  if (message.includes('"input_audio_buffer.commit"')) ws.send(JSON.stringify({ type: "input_audio_buffer.committed", item_id: "item-1" }));
  if (message.includes('"response.create"')) ws.send(JSON.stringify({ type: "response.created", response: { id: "resp-1", status: "in_progress" } }));
}

function recordClose(ws: WebSocket, closes: { code: number; reason: string }[]): void {
  ws.on("close", (code, reason) => closes.push({ code, reason: reason.toString() }));
}

/** A chat completion of one word for a plain POST to `…/v1/chat/completions` (none for `vllm-hung`); 404 for anything else. */
function chat(req: http.IncomingMessage, res: http.ServerResponse): void {
  req.resume();
  if (req.method !== "POST" || !/\/v1\/chat\/completions$/.test(req.url ?? "")) return void res.writeHead(404).end();
  // A hung engine: the request is read and never answered (the server's close ends it).
  if (req.url?.startsWith("/vllm-hung/")) return;
  req.on("end", () => {
    const body = { id: "chatcmpl-ws", object: "chat.completion", created: 0, model: "upstream-rt", choices: [{ index: 0, message: { role: "assistant", content: "served" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body));
  });
}
