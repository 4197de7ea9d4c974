import http from "node:http";
import type { Socket } from "node:net";
import zlib from "node:zlib";

/**
 * An OpenAI-compatible upstream that misbehaves on purpose, one behaviour per deployment: a
 * deployment's baseUrl is `<url>/<behaviour>` (e.g. `http://127.0.0.1:4711/silent-stream`), so
 * the gateway's request lands on `/<behaviour>/v1/chat/completions` and its health probe on
 * `/<behaviour>/health`. A behaviour may take one argument after a colon (`slow-headers:20000`).
 *
 * Every behaviour keeps counts a test can read in-process (`stats(behaviour)`): requests
 * received, requests still open, requests whose connection the gateway closed before the
 * answer was complete (the upstream request was cancelled), body bytes the gateway read of a
 * large answer, and health probes.
 */
export interface BehaviourStats {
  requests: number;
  /** Requests whose connection is still open (being answered, or held open on purpose). */
  open: number;
  /** Requests whose connection closed before the upstream finished its answer. */
  cancelled: number;
  /** Bytes of the answer the upstream managed to write (what the gateway read, give or take socket buffers). */
  bytesWritten: number;
  health: number;
  /** The request bodies received, parsed (null when not JSON), oldest first; the last 20. */
  bodies: unknown[];
  /** The same bodies as the text that came, for what parsing would change (a number past 2^53). */
  texts: string[];
}

export interface HostileUpstream {
  url: string;
  /** The counts of one behaviour (name without argument). */
  stats(behaviour: string): BehaviourStats;
  /** Resets every behaviour's counts. */
  reset(): void;
  /** Where redirects point: another origin, counting what reaches it. */
  elsewhere: { url: string; hits(): number };
  close(): Promise<void>;
}

/** nginx's 4xx pages (status, heading, text) by the name `html-400` takes as its argument. */
const NGINX_PAGES: Record<string, [number, string, string]> = {
  "plain-http": [400, "Bad Request", "The plain HTTP request was sent to HTTPS port"],
  // ssl_verify_client on, and the gateway sent no client certificate (mTLS in front of the engine).
  "no-cert": [400, "Bad Request", "No required SSL certificate was sent"],
  // A baseUrl that leads to a static site or a path nginx serves only by GET.
  "not-allowed": [405, "Not Allowed", "Not Allowed"],
  // An HTTP/2 connection reused for a host its certificate does not cover.
  misdirected: [421, "Misdirected Request", "Misdirected Request"],
};

type Answer = (req: http.IncomingMessage, res: http.ServerResponse, body: Buffer, arg: string | undefined, s: BehaviourStats) => void;

function chunk(model: string, content: string, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: "chatcmpl-h", object: "chat.completion.chunk", created: 1, model, choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
}

/** A stream's usage event, as vLLM sends it when asked for stream_options.include_usage: 3 prompt and 2 completion tokens. */
function usageChunk(model: string): string {
  return `data: ${JSON.stringify({ id: "chatcmpl-h", object: "chat.completion.chunk", created: 1, model, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n`;
}

/** A chat completion saying "ok", its usage `usage`, then any `after` fields. */
function completion(model: string, usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }, after: Record<string, unknown> = {}): string {
  return JSON.stringify({
    id: "chatcmpl-h",
    object: "chat.completion",
    created: 1,
    model,
    choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
    usage,
    ...after,
  });
}

/** A completion as vLLM lays it out with prompt_logprobs: usage (7 prompt, 2 completion tokens), then `kib` KiB of logprobs. */
function usageFirst(model: string, kib: number): string {
  const entry = (i: number) => ({ [String(1000 + i)]: { logprob: -1.25, rank: 1, decoded_token: "usage" } });
  const logprobs: unknown[] = [null];
  while (JSON.stringify(logprobs).length < kib * 1024) logprobs.push(entry(logprobs.length));
  return completion(model, { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 }, { prompt_logprobs: logprobs });
}

/**
 * A chat completion as vLLM lays it out with logprobs and prompt_logprobs: ~32 KiB of `choices`
 * (the content's tokens' logprobs, each token's text a decoy `"usage":{...}` the JSON escapes),
 * then its usage (7 prompt, 2 completion tokens), then `kib` KiB of `prompt_logprobs`: the usage
 * is in neither the body's first nor its last 8 KiB.
 */
function usageMiddle(model: string, kib: number): string {
  const decoy = '"usage":{"prompt_tokens":1000,"completion_tokens":1000}';
  const content: unknown[] = [];
  while (JSON.stringify(content).length < 32 * 1024) content.push({ token: decoy, logprob: -0.5, bytes: [34, 117], top_logprobs: [{ token: decoy, logprob: -0.5, bytes: [34] }] });
  const choices = [{ index: 0, message: { role: "assistant", content: decoy }, logprobs: { content }, finish_reason: "length" }];
  const logprobs: unknown[] = [null];
  // Its length summed as it grows: a stringify per entry would be quadratic in a MiB of them.
  for (let length = 6; length < kib * 1024; ) {
    const entry = { [String(1000 + logprobs.length)]: { logprob: -1.25, rank: 1, decoded_token: "usage" } };
    logprobs.push(entry);
    length += JSON.stringify(entry).length + 1;
  }
  return JSON.stringify({ id: "chatcmpl-m", object: "chat.completion", created: 1, model, choices, usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 }, prompt_logprobs: logprobs });
}

/**
 * A Responses API answer (not streamed) whose usage (7 input, 2 output tokens) lies mid-body:
 * ~32 KiB of output before it, and after it the request's `tools` repeated (a schema the client
 * wrote may hold a `"usage":{...}` of its own) and `kib` KiB of `output_messages`, as vLLM adds
 * them when asked (`enable_response_messages`).
 */
function responsesUsageMiddle(body: Buffer, kib: number): string {
  const request = ((): Record<string, unknown> => {
    try {
      return JSON.parse(body.toString("utf8")) as Record<string, unknown>;
    } catch {
      return {};
    }
  })();
  const text = "the usage was fine. ".repeat(1700);
  const output = [{ id: "msg_m", type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] }];
  const messages: unknown[] = [];
  while (JSON.stringify(messages).length < kib * 1024) messages.push({ author: { role: "assistant" }, content: [{ type: "text", text: "usage" }], channel: "final" });
  return JSON.stringify({
    id: "resp_m",
    object: "response",
    created_at: 1,
    model: request.model ?? "hostile",
    output,
    status: "completed",
    usage: { input_tokens: 7, input_tokens_details: { cached_tokens: 0 }, output_tokens: 2, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 9 },
    tools: request.tools ?? [],
    output_messages: messages,
  });
}

/** Writes `text` 4 KiB at a time with no content-length (chunked), as a proxy that strips it does. */
function sendChunked(res: http.ServerResponse, text: string, s: BehaviourStats): void {
  res.writeHead(200, { "content-type": "application/json" });
  s.bytesWritten += Buffer.byteLength(text);
  for (let at = 0; at < text.length; at += 4096) res.write(text.slice(at, at + 4096));
  res.end();
}

/**
 * A Responses API stream's events as vLLM writes them (`event:` and `data:` lines; the event's
 * fields in the openai package's order, its type last), answering "ok" in one delta: `opening`,
 * response.created and response.in_progress, which vLLM sends as soon as the request is accepted,
 * before the engine has made any token; `rest`, the answer through response.completed, its usage
 * (5 input, 1 output tokens) placed as `layout` says: last but `user` as vLLM lays the response out,
 * or before the echoed `instructions` and `tools` as SGLang does.
 */
function responsesEvents(body: Buffer, layout: "vllm" | "sglang" = "vllm"): { opening: string; rest: string } {
  const request = ((): Record<string, unknown> => {
    try {
      return JSON.parse(body.toString("utf8")) as Record<string, unknown>;
    } catch {
      return {};
    }
  })();
  const model = typeof request.model === "string" ? request.model : "hostile";
  let seq = 0;
  const event = (type: string, fields: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ ...fields, sequence_number: seq++, type })}\n\n`;
  const echoed = { instructions: request.instructions ?? null, tools: request.tools ?? [], metadata: request.metadata ?? {} };
  const response = (status: string, output: unknown[], usage: unknown) => {
    const head = { id: "resp_h", created_at: 1, model, object: "response", output, status };
    return layout === "sglang" ? { ...head, usage, parallel_tool_calls: true, tool_choice: "auto", ...echoed } : { ...head, ...echoed, parallel_tool_calls: true, tool_choice: "auto", usage, user: null };
  };
  const text = { type: "output_text", text: "ok", annotations: [] };
  const message = (status: string, content: unknown[]) => ({ id: "msg_h", content, role: "assistant", status, type: "message" });
  const part = { item_id: "msg_h", output_index: 0, content_index: 0 };
  const usage = { input_tokens: 5, input_tokens_details: { cached_tokens: 0 }, output_tokens: 1, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 6 };
  const opening = event("response.created", { response: response("in_progress", [], null) }) + event("response.in_progress", { response: response("in_progress", [], null) });
  const rest =
    event("response.output_item.added", { item: message("in_progress", []), output_index: 0 }) +
    event("response.content_part.added", { ...part, part: { ...text, text: "" } }) +
    event("response.output_text.delta", { ...part, delta: "ok", logprobs: [] }) +
    event("response.output_text.done", { ...part, text: "ok", logprobs: [] }) +
    event("response.content_part.done", { ...part, part: text }) +
    event("response.output_item.done", { item: message("completed", [text]), output_index: 0 }) +
    event("response.completed", { response: response("completed", [message("completed", [text])], usage) });
  return { opening, rest };
}

function requestOf(body: Buffer): { model: string; stream: boolean } {
  try {
    const j = JSON.parse(body.toString("utf8")) as { model?: unknown; stream?: unknown };
    return { model: typeof j.model === "string" ? j.model : "hostile", stream: j.stream === true };
  } catch {
    return { model: "hostile", stream: false };
  }
}

/** A well-behaved answer: JSON, or an SSE stream of two events and [DONE]. */
const answerOk: Answer = (_req, res, body) => {
  const { model, stream } = requestOf(body);
  if (!stream) return void res.writeHead(200, { "content-type": "application/json" }).end(completion(model));
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.end(chunk(model, "o") + chunk(model, "k", "stop") + "data: [DONE]\n\n");
};

/** Writes `byte` every `everyMs` until the client goes away. */
function drip(res: http.ServerResponse, everyMs: number, s: BehaviourStats): void {
  const timer = setInterval(() => {
    if (res.destroyed) return clearInterval(timer);
    res.write(" ");
    s.bytesWritten++;
  }, everyMs);
  res.on("close", () => clearInterval(timer));
}

const ENCODERS: Record<string, (b: Buffer) => Buffer> = { gzip: zlib.gzipSync, br: zlib.brotliCompressSync, deflate: zlib.deflateSync, zstd: zlib.zstdCompressSync };

/** Writes `parts` in order, each when the connection takes it (waiting for it to drain), then `then`. */
function writeAll(res: http.ServerResponse, parts: Iterable<string>, s: BehaviourStats, then: () => void): void {
  const it = parts[Symbol.iterator]();
  const pump = (): void => {
    for (let next = it.next(); !res.destroyed; next = it.next()) {
      if (next.done) return then();
      s.bytesWritten += Buffer.byteLength(next.value);
      if (!res.write(next.value)) return void res.once("drain", pump);
    }
  };
  pump();
}

/** A stream's first event, then one whose text is `kib` KiB of "x" in 4 KiB writes; `ended`: its end and [DONE] follow, and the body ends. */
function bigEvent(res: http.ServerResponse, body: Buffer, kib: number, ended: boolean, s: BehaviourStats): void {
  const { model } = requestOf(body);
  const [opening, end] = chunk(model, "@@").split("@@") as [string, string];
  res.writeHead(200, { "content-type": "text/event-stream" });
  function* parts(): Generator<string> {
    yield chunk(model, "first") + opening;
    for (let i = 0; i < kib / 4; i++) yield "x".repeat(4096);
    if (ended) yield `${end}data: [DONE]\n\n`;
  }
  writeAll(res, parts(), s, () => void (ended && res.end()));
}

/** An event every `everyMs` for as long as the connection lasts (the status already written). */
function tickForever(res: http.ServerResponse, model: string, s: BehaviourStats, everyMs: number): void {
  const timer = setInterval(() => {
    if (res.destroyed) return clearInterval(timer);
    const text = chunk(model, "tick");
    res.write(text);
    s.bytesWritten += text.length;
  }, everyMs);
  res.on("close", () => clearInterval(timer));
}

const BEHAVIOURS: Record<string, Answer> = {
  ok: answerOk,
  /** A chat answer as SGLang lays it out: the message carries `tool_calls` and `reasoning_content` as null. */
  sglang: (_req, res, body) => {
    const message = { role: "assistant", content: "ok", reasoning_content: null, tool_calls: null };
    const answer = { id: "chatcmpl-h", object: "chat.completion", created: 1, model: requestOf(body).model, choices: [{ index: 0, message, logprobs: null, finish_reason: "stop", matched_stop: 2 }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
  },
  /** Headers and one event, then nothing, with the connection held open. */
  /** An engine that hung mid-generation: a stream gets its first token and then nothing; a non-streamed request, nothing at all. */
  "hung-engine": (_req, res, body) => {
    const request = requestOf(body) as { model: string; stream?: unknown };
    if (request.stream !== true) return;
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk(request.model, "first"));
  },
  "silent-stream": (_req, res, body) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk(model, "first"));
  },
  /** One event, nothing for `arg` ms (default 1 s), then events every 50 ms for as long as the connection lasts: an engine that stalls mid-stream and recovers. */
  "silent-then-endless": (_req, res, body, arg, s) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk(model, "first"));
    const timer = setTimeout(() => tickForever(res, model, s, 50), Number(arg ?? 1000));
    res.on("close", () => clearTimeout(timer));
  },
  /** Events every `arg` ms (default 50) for as long as the connection lasts. */
  "endless-stream": (_req, res, body, arg, s) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    tickForever(res, requestOf(body).model, s, Number(arg ?? 50));
  },
  /** 1 KiB events as fast as the connection takes them (waiting for it to drain), for as long as it lasts. */
  "firehose-stream": (_req, res, body, _arg, s) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const text = chunk(model, "x".repeat(1024));
    const pump = (): void => {
      while (!res.destroyed) {
        s.bytesWritten += text.length;
        if (!res.write(text)) return void res.once("drain", pump);
      }
    };
    pump();
  },
  /**
   * A stream whose lines end with a lone CR (legal SSE): one event, nothing for `arg` ms (default
   * 1000), then another, the usage event when the request asked for it, and [DONE].
   */
  "cr-stream": (_req, res, body, arg, s) => {
    const { model } = requestOf(body);
    const asked = (JSON.parse(body.toString("utf8")) as { stream_options?: { include_usage?: boolean } }).stream_options?.include_usage === true;
    const cr = (event: string): string => event.replaceAll("\n", "\r");
    const usage = usageChunk(model);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(cr(chunk(model, "first")));
    const timer = setTimeout(() => {
      const rest = cr(chunk(model, "second", "stop") + (asked ? usage : "") + "data: [DONE]\n\n");
      s.bytesWritten += rest.length;
      res.end(rest);
    }, Number(arg ?? 1000));
    res.on("close", () => clearTimeout(timer));
  },
  /**
   * A stream in CRLF lines whose one event's data is two lines (JSON may break a line), the CRLF
   * between them cut across two writes `arg` ms apart (default 200): a write ends with the CR, the
   * next begins with its LF. Then [DONE].
   */
  "split-crlf": (_req, res, body, arg, s) => {
    const [head, tail] = chunk(requestOf(body).model, "whole", "stop").split(/(?<="delta":)/) as [string, string];
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(`${head}\r`);
    const timer = setTimeout(() => {
      const rest = `\ndata: ${tail.replaceAll("\n", "\r\n")}data: [DONE]\r\n\r\n`;
      s.bytesWritten += rest.length;
      res.end(rest);
    }, Number(arg ?? 200));
    res.on("close", () => clearTimeout(timer));
  },
  /**
   * A stream's last event and its usage event (3 prompt, 2 completion tokens) in one write, then
   * [DONE] `arg` ms later (default 1000): a client may leave between its usage and its end.
   */
  "usage-then-done": (_req, res, body, arg) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk(model, "ok", "stop") + usageChunk(model));
    const timer = setTimeout(() => res.end("data: [DONE]\n\n"), Number(arg ?? 1000));
    res.on("close", () => clearTimeout(timer));
  },
  /**
   * `arg` MiB (default 64) of events as vLLM writes them for `n: 4, logprobs: true, top_logprobs: 20`
   * (~2 KiB each, the four choices in turn), as fast as the connection takes them, then the usage
   * event (3 prompt tokens, a completion token an event) and [DONE].
   */
  "logprobs-stream": (_req, res, body, arg, s) => {
    const { model } = requestOf(body);
    const total = Number(arg ?? 64) * 1024 * 1024;
    const entry = (token: string) => ({ token, logprob: -0.123456789, bytes: [...Buffer.from(token)] });
    const event = (i: number): string => {
      const logprobs = { content: [{ ...entry("x"), top_logprobs: Array.from({ length: 20 }, (_, k) => entry(`tok${i}_${k}`)) }] };
      return `data: ${JSON.stringify({ id: "chatcmpl-h", object: "chat.completion.chunk", created: 1, model, choices: [{ index: i % 4, delta: { content: "x" }, logprobs, finish_reason: null }] })}\n\n`;
    };
    res.writeHead(200, { "content-type": "text/event-stream" });
    let events = 0;
    function* parts(): Generator<string> {
      for (let sent = 0; sent < total; events++) {
        const text = event(events);
        sent += text.length;
        yield text;
      }
    }
    writeAll(res, parts(), s, () => {
      const usage = { prompt_tokens: 3, completion_tokens: events, total_tokens: 3 + events };
      res.end(`data: ${JSON.stringify({ id: "chatcmpl-h", object: "chat.completion.chunk", created: 1, model, choices: [], usage })}\n\ndata: [DONE]\n\n`);
    });
  },
  /**
   * A long answer as an engine streams it: `arg` events (default 20,000) of one short word each
   * ("w0 ", "w1 ", …), as fast as the connection takes them, then its last event and [DONE].
   */
  "long-stream": (_req, res, body, arg, s) => {
    const { model } = requestOf(body);
    const events = Number(arg ?? 20_000);
    res.writeHead(200, { "content-type": "text/event-stream" });
    function* parts(): Generator<string> {
      for (let i = 0; i < events; i++) yield chunk(model, `w${i} `);
      yield chunk(model, "end", "stop") + "data: [DONE]\n\n";
    }
    writeAll(res, parts(), s, () => res.end());
  },
  /** An event of `arg` KiB (default 4096) after a small one, then [DONE]: an event larger than any a hook holds whole. */
  "big-event": (_req, res, body, arg, s) => bigEvent(res, body, Number(arg ?? 4096), true, s),
  /** The same event's start and its `arg` KiB (default 4096) of text, then nothing: its end never comes, and the connection is held open. */
  "unended-event": (_req, res, body, arg, s) => bigEvent(res, body, Number(arg ?? 4096), false, s),
  /** The same event's start, then its text in 4 KiB writes as fast as the connection takes them, for as long as it lasts: an upstream that streams on and never ends its event. */
  "endless-event": (_req, res, body, _arg, s) => {
    const [opening] = chunk(requestOf(body).model, "@@").split("@@") as [string];
    res.writeHead(200, { "content-type": "text/event-stream" });
    function* parts(): Generator<string> {
      yield chunk(requestOf(body).model, "first") + opening;
      for (;;) yield "x".repeat(4096);
    }
    writeAll(res, parts(), s, () => {});
  },
  /** Nothing for `arg` ms (default 1 s), then events every 50 ms for as long as the connection lasts. */
  "late-endless-stream": (req, res, body, arg, s) => {
    const timer = setTimeout(() => BEHAVIOURS["endless-stream"]?.(req, res, body, undefined, s), Number(arg ?? 1000));
    res.on("close", () => clearTimeout(timer));
  },
  /**
   * Status and headers at once, then no token for `arg` ms (default: never), then a normal stream:
   * vLLM and SGLang (through uvicorn) send a stream's headers before its first token, while the
   * request still waits in the engine's queue or the engine hangs.
   */
  "headers-first": (_req, res, body, arg) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.flushHeaders();
    if (arg === undefined) return;
    const timer = setTimeout(() => res.end(chunk(model, "o") + chunk(model, "k", "stop") + "data: [DONE]\n\n"), Number(arg));
    res.on("close", () => clearTimeout(timer));
  },
  /**
   * Wedged: the request is read and never answered — no status, no byte — while the connection
   * stays open and the health endpoint still says ok, as a hung vLLM or llama.cpp engine behind
   * a live HTTP server does.
   */
  wedged: () => {},
  /** Nothing at all for `arg` ms (default 20 s), then a normal answer. */
  "slow-headers": (req, res, body, arg) => {
    const timer = setTimeout(() => answerOk(req, res, body, undefined, emptyStats()), Number(arg ?? 20_000));
    res.on("close", () => clearTimeout(timer));
  },
  /** A 200 non-streamed body that drips a space every 100 ms and never ends. */
  "drip-body": (_req, res, _body, _arg, s) => {
    res.writeHead(200, { "content-type": "application/json" });
    drip(res, 100, s);
  },
  /** A 503 whose body drips a space every 100 ms and never ends. */
  "drip-error": (_req, res, _body, _arg, s) => {
    res.writeHead(503, { "content-type": "application/json" });
    drip(res, 100, s);
  },
  /**
   * A Responses API stream whose opening event comes a byte per write, each its own HTTP chunk (a
   * runtime reads each into a store of its own): a `response.created` whose data is padded with
   * `arg` (default 200,000) bytes, then the rest of the stream. Openings are held until the first
   * token (src/stream/first-bytes.ts), up to 1 MiB.
   */
  "byte-drip-opening": (_req, res, body, arg, s) => {
    const { rest } = responsesEvents(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    function* parts(): Generator<string> {
      yield 'event: response.created\ndata: {"type":"response.created","sequence_number":0,"pad":"';
      for (let i = 0; i < Number(arg ?? 200_000); i++) yield "x";
      yield `"}\n\n${rest}`;
    }
    writeAll(res, parts(), s, () => res.end());
  },
  /** A stream that opens with `arg` (default 200,000) SSE comments of two bytes (`:` and a line end), each its own HTTP chunk, then a normal stream. */
  "byte-drip-comments": (_req, res, body, arg, s) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    function* parts(): Generator<string> {
      for (let i = 0; i < Number(arg ?? 200_000); i++) yield ":\n";
      yield `${chunk(model, "o")}${chunk(model, "k", "stop")}data: [DONE]\n\n`;
    }
    writeAll(res, parts(), s, () => res.end());
  },
  /** A 503 whose JSON error body comes a byte per write, each its own HTTP chunk: `arg` (default 10,000) bytes of its message, then its end. */
  "byte-drip-error": (_req, res, _body, arg, s) => {
    res.writeHead(503, { "content-type": "application/json" });
    function* parts(): Generator<string> {
      yield '{"error":{"message":"';
      for (let i = 0; i < Number(arg ?? 10_000); i++) yield "x";
      yield '","type":"ServiceUnavailableError","code":503}}';
    }
    writeAll(res, parts(), s, () => res.end());
  },
  /** A 500 with a body of `arg` MiB (default 300), written as fast as the reader takes it. */
  "big-error": (_req, res, _body, arg, s) => {
    res.writeHead(500, { "content-type": "text/plain" });
    const total = Number(arg ?? 300) * 1024 * 1024;
    const piece = Buffer.alloc(64 * 1024, 0x61);
    const pump = (): void => {
      while (s.bytesWritten < total && !res.destroyed) {
        s.bytesWritten += piece.length;
        if (!res.write(piece)) return void res.once("drain", pump);
      }
      if (!res.destroyed) res.end();
    };
    pump();
  },
  /**
   * A 200 non-streamed completion whose text is `arg` MiB (default 64) long, its usage at its end,
   * sent chunked (no content-length) as fast as the reader takes it: as an embeddings answer for a
   * large batch comes.
   */
  "big-answer": (_req, res, body, arg, s) => {
    const { model } = requestOf(body);
    const [head, tail] = completion(model).split('"ok"') as [string, string];
    res.writeHead(200, { "content-type": "application/json" });
    const total = Number(arg ?? 64) * 1024 * 1024;
    const piece = Buffer.alloc(64 * 1024, 0x78);
    let text = 0;
    res.write(`${head}"`);
    const pump = (): void => {
      while (text < total && !res.destroyed) {
        text += piece.length;
        s.bytesWritten += piece.length;
        if (!res.write(piece)) return void res.once("drain", pump);
      }
      if (!res.destroyed) res.end(`"${tail}`);
    };
    pump();
  },
  /**
   * A 200 non-streamed completion with its usage before `arg` KiB (default 16) of
   * `prompt_logprobs`, as vLLM's chat answer is laid out when asked for them (its rerank answer
   * too: usage before the results), saying its length.
   */
  "usage-first": (_req, res, body, arg, s) => {
    const text = usageFirst(requestOf(body).model, Number(arg ?? 16));
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    s.bytesWritten += Buffer.byteLength(text);
    res.end(text);
  },
  /** A chat answer whose usage counts no engine could have reported: `arg` tokens each (default 1e308). */
  "usage-absurd": (_req, res, body, arg) => {
    const n = Number(arg ?? 1e308);
    res.writeHead(200, { "content-type": "application/json" }).end(completion(requestOf(body).model, { prompt_tokens: n, completion_tokens: n, total_tokens: n }));
  },
  /**
   * A rerank answer whose usage is a total alone, `arg` tokens (default 37), as older vLLM and
   * TEI-style servers report an input-only call.
   */
  /**
   * A whole answer (non-streamed, with its length) that reports no usage, as a proxy that strips
   * it passes one on: `arg` characters of generated text (default 400), laid out as the endpoint
   * asked lays it out (a chat message, a completion's text, a Responses answer's output text).
   */
  "no-usage": (req, res, body, arg) => {
    const { model } = requestOf(body);
    const text = "y".repeat(Number(arg ?? 400));
    const path = req.url ?? "";
    const answer = /\/v1\/responses$/.test(path)
      ? { id: "resp-h", object: "response", model, status: "completed", output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text, annotations: [] }] }] }
      : /\/v1\/completions$/.test(path)
        ? { id: "cmpl-h", object: "text_completion", created: 1, model, choices: [{ index: 0, text, finish_reason: "stop" }] }
        : { id: "chatcmpl-h", object: "chat.completion", created: 1, model, choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }] };
    const json = JSON.stringify(answer);
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(json) }).end(json);
  },
  "usage-total-only": (_req, res, _body, arg) => {
    const usage = { total_tokens: Number(arg ?? 37) };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "rerank-1", results: [{ index: 0, relevance_score: 0.9 }], usage }));
  },
  /** The same, sent chunked (no content-length), as an answer too large to hold whole is relayed. */
  "usage-first-chunked": (_req, res, body, arg, s) => {
    const text = usageFirst(requestOf(body).model, Number(arg ?? 16));
    res.writeHead(200, { "content-type": "application/json" });
    s.bytesWritten += Buffer.byteLength(text);
    for (let at = 0; at < text.length; at += 4096) res.write(text.slice(at, at + 4096));
    res.end();
  },
  /**
   * A chat answer with its usage mid-body (usageMiddle: `arg` KiB of prompt_logprobs after it,
   * default 16), sent chunked without content-length, as a proxy that strips it passes one on.
   */
  "usage-middle": (_req, res, body, arg, s) => sendChunked(res, usageMiddle(requestOf(body).model, Number(arg ?? 16)), s),
  /** The same saying its length, `arg` KiB of prompt_logprobs (default 1100): over 1 MiB, too large to hold whole. */
  "usage-middle-sized": (_req, res, body, arg, s) => {
    const text = usageMiddle(requestOf(body).model, Number(arg ?? 1100));
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    s.bytesWritten += Buffer.byteLength(text);
    res.end(text);
  },
  /** A Responses API answer with its usage mid-body (responsesUsageMiddle, `arg` KiB after it, default 64), sent chunked. */
  "responses-usage-middle": (_req, res, body, arg, s) => sendChunked(res, responsesUsageMiddle(body, Number(arg ?? 64)), s),
  /** A 500 page of HTML with a Python traceback in it, as a crashed server behind a proxy sends. */
  "html-500": (_req, res) => {
    res.writeHead(500, { "content-type": "text/html" });
    res.end('<html><body><h1>Internal Server Error</h1><pre>Traceback (most recent call last):\n  File "/srv/app/secret_path.py", line 42, in handler\nKeyError: \'token\'</pre></body></html>');
  },
  /**
   * A 200 page of HTML, streamed or not: what a baseUrl that reaches a web server other than the
   * API (a proxy's login or block page, a web UI's catch-all route) answers.
   */
  "html-200": (_req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end("<!doctype html><html><head><title>Sign in</title></head><body><form>Sign in to continue</form></body></html>");
  },
  /**
   * nginx's own 4xx page, as a proxy in front of an engine answers every request when the gateway
   * cannot reach the engine through it as configured, whatever the request holds: `arg` picks which
   * (NGINX_PAGES), the default a 400 for plain HTTP sent to its HTTPS port (a baseUrl of http://gpu:443).
   */
  "html-400": (_req, res, _body, arg) => {
    const page = NGINX_PAGES[arg ?? "plain-http"];
    if (!page) throw new Error(`html-400: no nginx page ${arg}`);
    const [status, title, said] = page;
    res.writeHead(status, { "content-type": "text/html" });
    res.end(`<html>\r\n<head><title>${status} ${said}</title></head>\r\n<body>\r\n<center><h1>${status} ${title}</h1></center>\r\n<center>${said}</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n`);
  },
  /** llama.cpp's answer to a prompt longer than its context: an OpenAI-style error with extra fields. */
  "context-exceeded": (_req, res) => {
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: 400, message: "the request exceeds the available context size, try increasing it", type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 } }));
  },
  /**
   * vLLM's (and SGLang's) answer to a body its request model refuses: a 400 whose message is
   * `f"{exc} {exc.errors()}"`, each holding the whole request body as the error's `input` — here a
   * body of `arg` KiB (default 1), so the message holds it twice and passes the gateway's 8 KiB
   * read past about 4 KiB. The reason (`msg`) comes near the message's start.
   */
  "validation-400": (_req, res, _body, arg) => {
    const input = `{'model': 'hostile-7b', 'messages': [{'role': 'user', 'content': '${"x".repeat(Number(arg ?? 1) * 1024)}'}], 'stream_options': {'include_usage': True}}`;
    const error = `{'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, Stream options can only be defined when \`stream=True\`.', 'input': ${input}}`;
    const message = `1 validation error:\n  ${error} [${error}]`;
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message, type: "Bad Request", param: null, code: 400 } }));
  },
  /**
   * TGI's (and any axum server's: mistral.rs) answer to a body its serde types refuse: axum's
   * rejection, a 422 in plain text, no JSON (an assistant message with `content: null` beside its
   * `tool_calls`, a content part it lacks).
   */
  "axum-422": (_req, res) => {
    res.writeHead(422, { "content-type": "text/plain; charset=utf-8" });
    res.end("Failed to deserialize the JSON body into the target type: messages[1]: invalid type: null, expected a string at line 1 column 120");
  },
  /** llama.cpp's answer while its model still loads: a 503 with an OpenAI-style error. */
  loading: (_req, res) => {
    res.writeHead(503, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: 503, message: "Loading model", type: "unavailable_error" } }));
  },
  /**
   * An error of status `arg` (default 500) whose message echoes the request's headers, and
   * whose extra field and code hold its bearer key, as a misconfigured proxy or a debug build's
   * error handler answers.
   */
  "echo-headers-error": (req, res, _body, arg) => {
    const auth = req.headers.authorization ?? "";
    const seen = Object.entries(req.headers).map(([k, v]) => `${k}=${String(v)}`).join("; ");
    res.writeHead(Number(arg ?? 500), { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message: `handler failed for request with headers ${seen}`, type: "server_error", code: auth.replace(/^Bearer /, ""), param: null, sent_key: auth } }));
  },
  /** echo-headers-error as an HTML-safe encoder writes it (Gson's, Go's): `=`, `&`, `<`, `>` and `/` escaped. */
  "echo-headers-error-escaped": (req, res, _body, arg) => {
    const auth = req.headers.authorization ?? "";
    const seen = Object.entries(req.headers).map(([k, v]) => `${k}=${String(v)}`).join("; ");
    const escaped = JSON.stringify({ error: { message: `handler failed for request with headers ${seen}`, type: "server_error", code: auth.replace(/^Bearer /, ""), param: null } }).replace(/[=&<>]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).replaceAll("/", "\\/");
    res.writeHead(Number(arg ?? 500), { "content-type": "application/json" });
    res.end(escaped);
  },
  /** A 429 with Retry-After `arg` seconds (default 30). */
  "rate-limited": (_req, res, _body, arg) => {
    res.writeHead(429, { "content-type": "application/json", "retry-after": arg ?? "30" });
    res.end(JSON.stringify({ error: { message: "too many requests", type: "rate_limit_error", param: null, code: "rate_limited" } }));
  },
  /**
   * A vLLM serving a chat model: every other endpoint (embeddings, rerank, score: vLLM registers
   * them for pooling models only) is a path no route serves, FastAPI's 404 `{"detail":"Not Found"}`.
   */
  "chat-only": (req, res, body, arg, s) => {
    if (/\/v1\/chat\/completions$/.test(req.url ?? "")) return answerOk(req, res, body, arg, s);
    res.writeHead(404, { "content-type": "application/json" }).end('{"detail":"Not Found"}');
  },
  /**
   * A llama.cpp server started with --embeddings at its default ubatch (512 tokens): an input it
   * cannot fit in one physical batch (here one over `arg` characters, default 2000) is its 500
   * server_error, in its own words (tools/server/server-context.cpp); any other is embedded.
   */
  "llamacpp-ubatch": (req, res, body, arg) => {
    const input = (JSON.parse(body.toString("utf8")) as { input?: unknown }).input;
    if (String(input).length > Number(arg ?? 2000)) {
      res.writeHead(500, { "content-type": "application/json; charset=utf-8" });
      return void res.end(JSON.stringify({ error: { code: 500, message: "input (3926 tokens) is too large to process. increase the physical batch size (current batch size: 512)", type: "server_error" } }));
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data: [{ object: "embedding", index: 0, embedding: [0.1, 0.2] }], model: requestOf(body).model, usage: { prompt_tokens: 1, total_tokens: 1 } }));
  },
  /**
   * A llama.cpp server started for chat alone: /v1/embeddings (and /v1/rerank) without --embeddings
   * (--reranking) is its 501 not_supported_error.
   */
  "llamacpp-chat": (req, res, body, arg, s) => {
    if (/\/v1\/chat\/completions$/.test(req.url ?? "")) return answerOk(req, res, body, arg, s);
    res.writeHead(501, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: 501, message: "This server does not support embeddings. Start it with `--embeddings`", type: "not_supported_error" } }));
  },
  /**
   * Ollama serving chat: its router (gin) answers a path it has no route for (/v1/rerank, /v1/score)
   * with a plain-text page, no error body.
   */
  "router-page": (req, res, body, arg, s) => {
    if (/\/v1\/chat\/completions$/.test(req.url ?? "")) return answerOk(req, res, body, arg, s);
    res.writeHead(404, { "content-type": "text/plain" }).end("404 page not found");
  },
  /** A reverse proxy whose route to the engine went away (Traefik once its container stopped): its plain-text 404 page on every path. */
  "proxy-404": (req, res) => {
    req.resume();
    res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("404 page not found\n");
  },
  /** vLLM's answer when asked for a model it does not serve. */
  "wrong-model": (_req, res, body) => {
    const { model } = requestOf(body);
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "error", message: `The model \`${model}\` does not exist.`, type: "NotFoundError", param: null, code: 404 }));
  },
  /** vLLM's answer to a Responses request whose `previous_response_id` it did not store (its response store on). */
  "response-not-found": (_req, res) => {
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message: "Response with id 'resp_elsewhere' not found.", type: "invalid_request_error", param: "response_id", code: 404 } }));
  },
  /**
   * The same answer as other vLLM versions give it: the request's id named in the message, and no
   * `param` (the older top-level shape, `"object":"error"`).
   */
  "response-not-found-unnamed": (_req, res, body) => {
    const id = String((JSON.parse(body.toString("utf8")) as { previous_response_id?: unknown }).previous_response_id);
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "error", message: `Response with id '${id}' not found.`, type: "invalid_request_error", param: null, code: 404 }));
  },
  /** Answers with status `arg` (e.g. 204, 304) and no body. */
  status: (_req, res, _body, arg) => {
    res.writeHead(Number(arg ?? 204)).end();
  },
  /** A 500 when the body contains the text `arg` (default "CRASH"), a normal answer otherwise. */
  "crash-on": (req, res, body, arg, s) => {
    if (!body.toString("utf8").includes(arg ?? "CRASH")) return answerOk(req, res, body, undefined, s);
    res.writeHead(500, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message: "CUDA error: an illegal memory access was encountered", type: "InternalServerError", param: null, code: 500 } }));
  },
  /**
   * As `crash-on`, behind a proxy (Envoy, Istio, Knative): the engine's crash reaches the gateway as
   * the proxy's plain-text 503, with no Retry-After.
   */
  "crash-on-behind-proxy": (req, res, body, arg, s) => {
    if (!body.toString("utf8").includes(arg ?? "CRASH")) return answerOk(req, res, body, undefined, s);
    res.writeHead(503, { "content-type": "text/plain" });
    res.end("upstream connect error or disconnect/reset before headers. reset reason: connection termination");
  },
  /**
   * An engine behind a web application firewall that judges bodies (Cloudflare's WAF managed rules,
   * ModSecurity with the OWASP CRS): a request whose body holds the text `arg` (default "DROP TABLE")
   * is refused with the firewall's 403 HTML page, any other answered; its `/health`, which has no
   * body, passes.
   */
  waf: (req, res, body, arg, s) => {
    if (!body.toString("utf8").includes(arg ?? "DROP TABLE")) return answerOk(req, res, body, undefined, s);
    res.writeHead(403, { "content-type": "text/html; charset=UTF-8" });
    res.end("<!DOCTYPE html><html><head><title>Attention Required!</title></head><body><h1>Sorry, you have been blocked</h1></body></html>");
  },
  /** One whole event, then the connection is destroyed between events. */
  "cut-between-events": (_req, res, body) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk(model, "first"));
    setTimeout(() => res.socket?.destroy(), 20);
  },
  /** A non-streamed answer that says its length, half of it written, then the connection destroyed. */
  /**
   * A stream's headers, then an SSE comment every 100 ms for `arg` ms (default 2000), as a proxy
   * keeping a queued request's connection alive writes them, then a normal stream.
   */
  "comments-first": (req, res, body, arg, s) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    const timer = setInterval(() => res.write(": keep-alive\n\n"), 100);
    const done = setTimeout(() => {
      clearInterval(timer);
      if (res.destroyed) return;
      const { model } = requestOf(body);
      res.end(chunk(model, "o") + chunk(model, "k", "stop") + "data: [DONE]\n\n");
    }, Number(arg ?? 2000));
    res.on("close", () => {
      clearInterval(timer);
      clearTimeout(done);
    });
  },
  /**
   * A 200 with no body at all: an empty event stream, or an empty JSON answer that says its length
   * (0) — or, with `arg` "chunked", that does not (chunked, no chunk).
   */
  empty: (_req, res, body, arg) => {
    const { stream } = requestOf(body);
    res.writeHead(200, stream || arg === "chunked" ? { "content-type": stream ? "text/event-stream" : "application/json" } : { "content-type": "application/json", "content-length": "0" });
    res.end();
  },
  /**
   * A non-streamed answer that says its length (or, with `arg` "chunked", does not), half of it
   * written, then nothing, with the connection held open; with `arg` "headers", chunked, its
   * headers alone.
   */
  "stalled-body": (_req, res, body, arg) => {
    const text = completion(requestOf(body).model);
    res.writeHead(200, { "content-type": "application/json", ...(arg === "chunked" || arg === "headers" ? {} : { "content-length": Buffer.byteLength(text) }) });
    if (arg === "headers") return void res.flushHeaders();
    res.write(text.slice(0, Math.floor(text.length / 2)));
  },
  /**
   * A non-streamed answer's headers (chunked), then nothing, and after `arg` ms (default 200) the
   * connection destroyed: a server that crashes during the generation, no byte of its answer sent.
   */
  "crash-mid-generation": (_req, res, _body, arg) => {
    res.writeHead(200, { "content-type": "application/json" }).flushHeaders();
    const timer = setTimeout(() => res.socket?.destroy(), Number(arg ?? 200));
    res.on("close", () => clearTimeout(timer));
  },
  "cut-body": (_req, res, body) => {
    const text = completion(requestOf(body).model);
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.write(text.slice(0, Math.floor(text.length / 2)));
    setTimeout(() => res.socket?.destroy(), 20);
  },
  /**
   * A well-behaved answer in content-encoding `arg` (gzip, br, deflate or zstd), though the
   * gateway asks for none: the runtime decodes gzip and br, and passes the others' bytes on as
   * they came.
   */
  encoded: (_req, res, body, arg = "gzip") => {
    const { model, stream } = requestOf(body);
    const text = stream ? chunk(model, "o") + chunk(model, "k", "stop") + "data: [DONE]\n\n" : completion(model);
    const encoded = ENCODERS[arg]?.(Buffer.from(text));
    if (!encoded) return void res.writeHead(500).end(`no encoder for ${arg}`);
    res.writeHead(200, { "content-type": stream ? "text/event-stream" : "application/json", "content-encoding": arg, ...(stream ? {} : { "content-length": encoded.length }) });
    res.end(encoded);
  },
  /**
   * One content event, then an error event, then events every 50 ms for as long as the connection
   * lasts: a server that does not stop at its own error. `arg` `tgi`: the error event is TGI's,
   * its `error` a bare string (router/src/server.rs, `impl From<InferError> for Event`).
   */
  "error-then-endless": (_req, res, body, arg, s) => {
    const { model } = requestOf(body);
    const error = arg === "tgi" ? { error: "the shard failed", error_type: "generation" } : { error: { message: "the engine failed", type: "InternalServerError", code: 500 } };
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk(model, "first") + `data: ${JSON.stringify(error)}\n\n`);
    tickForever(res, model, s, 50);
  },
  /**
   * A 200 stream whose first event is the server's error, then [DONE], as vLLM's and SGLang's
   * stream generators answer an exception raised after the headers went out: `arg` says which —
   * `vllm-500` (default; vLLM's engine failing: `{"error":{…,"type":"InternalServerError","code":500}}`),
   * `sglang-400` (SGLang's ValueError: the older shape, `"object":"error"` inside `error`), or
   * `responses` (a Responses stream: its openings, then the API's `error` event, OpenAI's shape).
   * Its message carries the request's bearer key, as a debug build's handler may echo it.
   */
  "error-event-first": (req, res, body, arg = "vllm-500") => {
    const key = (req.headers.authorization ?? "").replace(/^Bearer /, "");
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (arg === "responses") {
      const { opening } = responsesEvents(body);
      const error = { type: "error", code: "server_error", message: `the engine failed (key ${key})`, param: null, sequence_number: 2 };
      return void res.end(`${opening}event: error\ndata: ${JSON.stringify(error)}\n\n`);
    }
    const error =
      arg === "sglang-400"
        ? { error: { object: "error", message: `Requested token count exceeds the model's maximum context length (key ${key})`, type: "BadRequestError", param: null, code: 400 } }
        : { error: { message: `Internal server error (key ${key})`, type: "InternalServerError", param: null, code: 500 } };
    res.end(`data: ${JSON.stringify(error)}\n\ndata: [DONE]\n\n`);
  },
  /**
   * A llama.cpp build (llama-server of 2024 to mid-2025) refusing a streamed prompt longer than its
   * context after its headers went out: it writes the error as an SSE `error:` field, no `data`
   * line (server_sent_event(sink, "error", …), its JSON compact and in llama.cpp's key order), then
   * `data: [DONE]`. A client's parser dispatches no event for it. With `arg` a number, the body goes
   * out that many bytes an HTTP chunk, as a proxy that re-chunks it may pass it on.
   */
  "error-field-first": (_req, res, _body, arg) => {
    const error = { code: 400, message: "the request exceeds the available context size, try increasing it", type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 };
    res.writeHead(200, { "content-type": "text/event-stream" });
    const text = `error: ${JSON.stringify(error)}\n\ndata: [DONE]\n\n`;
    const every = Number(arg ?? text.length);
    const write = (at: number): void => {
      if (at + every >= text.length) return void res.end(text.slice(at));
      res.write(text.slice(at, at + every));
      setTimeout(() => write(at + every), 1);
    };
    write(0);
  },
  /**
   * A server that ignores `stream`: a JSON completion whatever was asked, its first half, then
   * after `arg` ms (default 1500) the rest.
   */
  "json-always": (_req, res, body, arg) => {
    const text = completion(requestOf(body).model);
    res.writeHead(200, { "content-type": "application/json" });
    res.write(text.slice(0, text.length >> 1));
    const timer = setTimeout(() => res.end(text.slice(text.length >> 1)), Number(arg ?? 1500));
    res.on("close", () => clearTimeout(timer));
  },
  /**
   * A Responses API stream as vLLM sends it: response.created and response.in_progress at once,
   * while the request waits for the engine, then its tokens after `arg` ms (default: never, the
   * connection held open).
   */
  "responses-created-first": (_req, res, body, arg) => {
    const { opening, rest } = responsesEvents(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(opening);
    if (arg === undefined) return;
    const timer = setTimeout(() => res.end(rest), Number(arg));
    res.on("close", () => clearTimeout(timer));
  },
  /**
   * A Responses API stream as SGLang writes it: its closing response.completed puts the usage (5
   * input, 1 output tokens) before the request's echoed `instructions` and `tools`, however long.
   */
  "responses-sglang": (_req, res, body) => {
    const { opening, rest } = responsesEvents(body, "sglang");
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(opening + rest);
  },
  /** A Responses API stream as vLLM writes it, up to its first delta, then the connection is destroyed between events. */
  "responses-cut-between-events": (_req, res, body) => {
    const { opening, rest } = responsesEvents(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(opening + rest.split("\n\n").slice(0, 3).join("\n\n") + "\n\n");
    setTimeout(() => res.socket?.destroy(), 20);
  },
  /**
   * A server with no health endpoint, as Ollama is (or an ingress that exposes only /v1/*): its
   * `/health` answers 404. Its first `arg` requests (default 0) fail with a 500, a transient
   * outage; after it, a stream takes 2 s (20 events 100 ms apart, then its end and [DONE]), as a
   * chat answer does, and a non-streamed request is answered at once.
   */
  "no-health": (req, res, body, arg, s) => {
    if (s.requests <= Number(arg ?? 0)) {
      res.writeHead(500, { "content-type": "application/json" });
      return void res.end(JSON.stringify({ error: { message: "model runner crashed", type: "InternalServerError", param: null, code: 500 } }));
    }
    const { model, stream } = requestOf(body);
    if (!stream) return answerOk(req, res, body, arg, s);
    res.writeHead(200, { "content-type": "text/event-stream" });
    let sent = 0;
    const timer = setInterval(() => {
      const text = ++sent < 20 ? chunk(model, `w${sent} `) : chunk(model, "end", "stop") + "data: [DONE]\n\n";
      s.bytesWritten += text.length;
      if (sent < 20) return void res.write(text);
      clearInterval(timer);
      res.end(text);
    }, 100);
    res.on("close", () => clearInterval(timer));
  },
  /**
   * Two events each with its usage so far, as vLLM's continuous_usage_stats writes them (50 prompt
   * tokens, 1 then 2 completion tokens), then the connection is destroyed.
   */
  "usage-each-then-cut": (_req, res, body) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (const completion of [1, 2]) {
      const event = { id: "chatcmpl-h", object: "chat.completion.chunk", created: 1, model, choices: [{ index: 0, delta: { content: "x" }, finish_reason: null }], usage: { prompt_tokens: 50, completion_tokens: completion, total_tokens: 50 + completion } };
      res.write(`data: ${JSON.stringify(event)}\n\n`);
    }
    setTimeout(() => res.socket?.destroy(), 20);
  },
  /** One whole event, then half of the next, then the connection is destroyed. */
  "cut-mid-event": (_req, res, body) => {
    const { model } = requestOf(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const second = chunk(model, "second");
    res.write(chunk(model, "first") + second.slice(0, Math.floor(second.length / 2)));
    setTimeout(() => res.socket?.destroy(), 20);
  },
};

/**
 * A Responses API engine with its response store on (vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1,
 * SGLang by default): each answer is stored under a new id, and a request naming one as its
 * `previous_response_id` goes on from that conversation, its answer reading the stored
 * conversation back with the new input; an id it did not store is vLLM's 404. Not streamed.
 */
function storedResponses(): Answer {
  const stored = new Map<string, string>();
  return (_req, res, body) => {
    const request = JSON.parse(body.toString("utf8")) as { model?: unknown; input?: unknown; previous_response_id?: unknown };
    const previous = typeof request.previous_response_id === "string" ? request.previous_response_id : null;
    const before = previous === null ? "" : stored.get(previous);
    if (before === undefined) {
      res.writeHead(404, { "content-type": "application/json" });
      return void res.end(JSON.stringify({ error: { message: `Response with id '${previous}' not found.`, type: "invalid_request_error", param: "response_id", code: 404 } }));
    }
    const conversation = `${before}${typeof request.input === "string" ? request.input : JSON.stringify(request.input)}\n`;
    const id = `resp_${stored.size + 1}`;
    stored.set(id, conversation);
    const text = { type: "output_text", text: conversation, annotations: [] };
    const answer = {
      id,
      object: "response",
      created_at: 1,
      model: request.model,
      status: "completed",
      previous_response_id: previous,
      output: [{ id: `msg_${id}`, type: "message", role: "assistant", status: "completed", content: [text] }],
      usage: { input_tokens: 5, input_tokens_details: { cached_tokens: 0 }, output_tokens: 1, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 6 },
    };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
  };
}

function emptyStats(): BehaviourStats {
  return { requests: 0, open: 0, cancelled: 0, bytesWritten: 0, health: 0, bodies: [], texts: [] };
}

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no address");
  return `http://127.0.0.1:${address.port}`;
}

export async function startHostileUpstream(): Promise<HostileUpstream> {
  const stats = new Map<string, BehaviourStats>();
  const statsOf = (name: string): BehaviourStats => {
    let s = stats.get(name);
    if (!s) stats.set(name, (s = emptyStats()));
    return s;
  };

  let elsewhereHits = 0;
  const elsewhere = http.createServer((req, res) => {
    elsewhereHits++;
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(completion("elsewhere")));
  });
  const elsewhereUrl = await listen(elsewhere);

  // The behaviours that need this server's or the other origin's address.
  const answers: Record<string, Answer> = {
    ...BEHAVIOURS,
    "response-store": storedResponses(),
    /** A redirect (status `arg`, default 307) to another origin. */
    redirect: (_req, res, _body, arg) => {
      res.writeHead(Number(arg ?? 307), { location: `${elsewhereUrl}/v1/chat/completions` }).end();
    },
    /** Fails every request (500), and answers its health probe with a redirect to another origin, which answers 200. */
    "redirect-health": (_req, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "down", type: "InternalServerError", param: null, code: 500 } }));
    },
    /** A redirect to itself, forever, through a URL that carries credentials. */
    "redirect-loop": (req, res) => {
      res.writeHead(302, { location: `http://user:hunter2@${req.headers.host}${req.url}` }).end();
    },
    /**
     * llama-server's keep-alive lie: it advertises keep-alive, but a request that arrives on a
     * connection it already answered on finds that connection dead — here, deterministically: the
     * socket is destroyed the moment a second request arrives on it, before any response byte.
     */
    "keepalive-lie": (req, res, body, arg, s) => {
      const socket = req.socket as Socket & { served?: number };
      socket.served = (socket.served ?? 0) + 1;
      if (socket.served > 1) return void socket.destroy();
      answerOk(req, res, body, arg, s);
    },
  };

  const server = http.createServer((req, res) => {
    const path = req.url ?? "/";
    const m = /^\/([^/:]+)(?::([^/]+))?(\/.*)$/.exec(path);
    const name = m?.[1] ?? "";
    const s = statsOf(name);
    if (m?.[3] === "/health") {
      s.health++;
      req.resume();
      if (name === "redirect-health") return void res.writeHead(302, { location: `${elsewhereUrl}/health` }).end();
      if (name === "no-health") return void res.writeHead(404, { "content-type": "text/plain" }).end("404 page not found");
      return void res.writeHead(200, { "content-type": "application/json" }).end('{"status":"ok"}');
    }
    const answer = answers[name];
    // Each behaviour answers the paths the gateway sends requests to; `chat-only`, `llamacpp-chat`, `llamacpp-ubatch` and `router-page` every path, as a real server's router does.
    if (!answer || (!["chat-only", "llamacpp-chat", "llamacpp-ubatch", "router-page"].includes(name) && !/\/(completions|responses|rerank)$/.test(m?.[3] ?? ""))) {
      req.resume();
      return void res.writeHead(404, { "content-type": "application/json" }).end('{"error":{"message":"no such behaviour"}}');
    }
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => {
      const body = Buffer.concat(parts);
      s.requests++;
      s.open++;
      try {
        s.bodies.push(JSON.parse(body.toString("utf8")));
      } catch {
        s.bodies.push(null);
      }
      if (s.bodies.length > 20) s.bodies.shift();
      s.texts.push(body.toString("utf8"));
      if (s.texts.length > 20) s.texts.shift();
      res.on("close", () => {
        s.open--;
        if (!res.writableFinished) s.cancelled++;
      });
      answer(req, res, body, m?.[2], s);
    });
  });
  const url = await listen(server);
  return {
    url,
    stats: (name) => ({ ...statsOf(name) }),
    reset: () => {
      stats.clear();
      elsewhereHits = 0;
    },
    elsewhere: { url: elsewhereUrl, hits: () => elsewhereHits },
    close: async () => {
      server.closeAllConnections();
      elsewhere.closeAllConnections();
      await Promise.all([new Promise<void>((r) => server.close(() => r())), new Promise<void>((r) => elsewhere.close(() => r()))]);
    },
  };
}
