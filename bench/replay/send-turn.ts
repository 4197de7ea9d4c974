import type { Agent, IncomingHttpHeaders } from "node:http";
import { keepAliveAgent, streamPost } from "./http-stream.ts";
import { bodyFrame, requestBody, type BodyFrame } from "./request-body.ts";
import { SseScanner } from "./sse-scanner.ts";
import { StreamReply, errorMessage } from "./stream-reply.ts";
import type { ReplayOptions, RequestResult } from "./types.ts";

/** What every request of a replay shares: where it goes, how, and the fixed body fields. */
export interface Endpoint {
  url: URL;
  agent: Agent;
  headers: Readonly<Record<string, string>>;
  body: BodyFrame;
  timeoutMs: number;
}

const DEFAULT_TIMEOUT_MS = 120_000;

/** The endpoint of a replay, with its own keep-alive agent: destroy the agent when the replay ends. */
export function endpointFor(opts: ReplayOptions): Endpoint {
  const url = new URL(`${opts.baseUrl.replace(/\/+$/, "")}/v1/chat/completions`);
  return {
    url,
    agent: keepAliveAgent(url),
    headers: {
      "content-type": "application/json",
      accept: "text/event-stream",
      ...(opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {}),
      ...opts.headers,
    },
    body: bodyFrame(opts.model, opts.extraBody ?? {}),
    timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  };
}

export interface TurnRequest {
  session: string;
  turn: number;
  /** JSON text of each message, in order. */
  messagesJson: readonly string[];
  maxTokens: number;
  /** Keep the reply's text (to append it to the history). */
  collectText: boolean;
}

const ERROR_BODY_LIMIT = 4096;

/** Sends one streamed chat request; a failure is recorded in the result, never thrown. */
export async function sendTurn(endpoint: Endpoint, request: TurnRequest): Promise<{ result: RequestResult; text: string }> {
  const body = requestBody(endpoint.body, request.messagesJson, request.maxTokens);
  const reply = new StreamReply(request.collectText);
  let status = 0;
  let headers: IncomingHttpHeaders = {};
  let streaming = false;
  let rawBody = "";
  let chunkAt = 0;
  let timedOut = false;
  const scanner = new SseScanner((event, data) => reply.onEvent(event, data, chunkAt));

  const started = performance.now();
  const failure = await streamPost(endpoint.url, endpoint.agent, endpoint.headers, body, endpoint.timeoutMs, {
    response(code, responseHeaders) {
      status = code;
      headers = responseHeaders;
      streaming = code >= 200 && code < 300 && (responseHeaders["content-type"] ?? "").startsWith("text/event-stream");
    },
    chunk(data, at) {
      if (streaming) {
        chunkAt = at;
        scanner.push(data);
      } else if (rawBody.length < ERROR_BODY_LIMIT) {
        rawBody += data.toString("utf8");
      }
    },
    timedOut() {
      timedOut = true;
    },
  });
  const ended = performance.now();
  if (streaming && failure === null) {
    chunkAt = ended;
    scanner.end();
  }

  const error = failure ?? responseError(status, headers, streaming, rawBody) ?? reply.error ?? (reply.done ? null : "stream ended without [DONE]");
  return {
    result: {
      session: request.session,
      turn: request.turn,
      status,
      error,
      ttftMs: reply.firstOutputAt === null ? null : reply.firstOutputAt - started,
      totalMs: ended - started,
      ...(timedOut ? { timedOutMs: endpoint.timeoutMs } : {}),
      promptTokens: reply.usage?.promptTokens ?? null,
      cachedTokens: reply.usage?.cachedTokens ?? null,
      completionTokens: reply.usage?.completionTokens ?? null,
      backend: header(headers, "x-kvgate-backend"),
      reason: header(headers, "x-kvgate-reason"),
    },
    text: reply.text,
  };
}

function responseError(status: number, headers: IncomingHttpHeaders, streaming: boolean, rawBody: string): string | null {
  if (status < 200 || status >= 300) return `HTTP ${status}: ${errorMessage(rawBody)}`;
  if (!streaming) return `expected an event stream, got ${headers["content-type"] ?? "no content-type"}`;
  return null;
}

function header(headers: IncomingHttpHeaders, name: string): string | null {
  const value = headers[name];
  return Array.isArray(value) ? (value[0] ?? null) : (value ?? null);
}
