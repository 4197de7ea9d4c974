/**
 * The chaos load: `connections` closed loops, each sending a streamed chat request to the gateway,
 * reading the SSE body to its end and sending the next, until the deadline. Every request is
 * classified by how it ended, from the client's side only — what a user of the gateway would see.
 */
import type { Agent, IncomingHttpHeaders } from "node:http";
import { keepAliveAgent, streamPost } from "../replay/http-stream.ts";
import { SseScanner } from "../replay/sse-scanner.ts";

/**
 * ok: [DONE] arrived. early-error: a non-200 status, or the connection failed before any body
 * byte (the client can retry: nothing was shown to the user). cut: the body started and ended
 * without [DONE] (the user saw part of an answer); `errorEvent` says whether its last event was
 * an SSE error event (`data: {"error": ...}`), the only way a stream can say it failed.
 */
export type Outcome = "ok" | "early-error" | "cut";

export interface RequestRecord {
  /** Date.now() at sending and at the end of the response. */
  startedAt: number;
  endedAt: number;
  outcome: Outcome;
  status: number;
  errorEvent: boolean;
  backend: string | null;
  reason: string | null;
  /** What went wrong, for the samples in the report; null when ok. */
  detail: string | null;
}

export interface LoadOptions {
  url: string;
  /** Sent with every request (the gateway's key). */
  headers: Readonly<Record<string, string>>;
  model: string;
  connections: number;
  durationMs: number;
  maxTokens: number;
  /** Per request, sending to last byte. */
  timeoutMs: number;
  /** Pause of a loop after an early error, so a failing gateway is not hammered in a tight loop. */
  errorPauseMs: number;
  /** Upper bound on requests in all, whatever the gateway's speed. */
  maxRequests: number;
}

/** Distinct system prompts: requests of one tenant share a prefix, as prefix-aware routing expects. */
const TENANTS = 16;
const ERROR_BODY_LIMIT = 512;

function systemPrompt(tenant: number): string {
  const rule = `Tenant ${tenant}: you are a support assistant for product line ${tenant}; answer briefly, cite the manual section, never guess. `;
  return rule.repeat(12);
}

function requestBody(o: LoadOptions, loop: number, n: number): Buffer {
  return Buffer.from(
    JSON.stringify({
      model: o.model,
      stream: true,
      max_tokens: o.maxTokens,
      messages: [
        { role: "system", content: systemPrompt(loop % TENANTS) },
        { role: "user", content: `Question ${n} from client ${loop}: how do I reset the device?` },
      ],
    }),
  );
}

function header(headers: IncomingHttpHeaders, name: string): string | null {
  const v = headers[name];
  return typeof v === "string" ? v : null;
}

function isErrorEvent(data: string): boolean {
  if (!data.startsWith("{")) return false;
  try {
    const parsed: unknown = JSON.parse(data);
    return typeof parsed === "object" && parsed !== null && "error" in parsed;
  } catch {
    return false;
  }
}

/** One request, read to its end; never throws. */
async function sendOne(url: URL, agent: Agent, headers: Readonly<Record<string, string>>, body: Buffer, timeoutMs: number): Promise<RequestRecord> {
  let status = 0;
  let replyHeaders: IncomingHttpHeaders = {};
  let bodyBytes = 0;
  let errorText = "";
  // Written by the scanner's callback, which TypeScript's narrowing does not follow.
  const seen: { last: string | null; done: boolean } = { last: null, done: false };
  const scanner = new SseScanner((_event, data) => {
    seen.last = data;
    if (data === "[DONE]") seen.done = true;
  });
  const startedAt = Date.now();
  const failure = await streamPost(url, agent, { ...headers, "content-type": "application/json", accept: "text/event-stream" }, body, timeoutMs, {
    response(code, h) {
      status = code;
      replyHeaders = h;
    },
    chunk(data) {
      bodyBytes += data.length;
      if (status === 200) scanner.push(data);
      else if (errorText.length < ERROR_BODY_LIMIT) errorText += data.toString("utf8");
    },
  });
  const endedAt = Date.now();
  if (status === 200) scanner.end();
  const base = { startedAt, endedAt, status, backend: header(replyHeaders, "x-kvgate-backend"), reason: header(replyHeaders, "x-kvgate-reason") };
  if (status !== 200) {
    const detail = status === 0 ? (failure ?? "no response") : `HTTP ${status}: ${errorText.slice(0, 200)}`;
    return { ...base, outcome: "early-error", errorEvent: false, detail };
  }
  if (seen.done) return { ...base, outcome: "ok", errorEvent: false, detail: null };
  if (bodyBytes === 0) return { ...base, outcome: "early-error", errorEvent: false, detail: `200 with no body: ${failure ?? "ended empty"}` };
  const last = seen.last;
  const errorEvent = last !== null && isErrorEvent(last);
  const detail = `${failure ?? "ended without [DONE]"}; last event: ${last === null ? "none" : last.slice(0, 200)}`;
  return { ...base, outcome: "cut", errorEvent, detail };
}

export interface LoadRun {
  records: RequestRecord[];
  /** Date.now() when the loops started and when the last one finished (streams drained). */
  startedAt: number;
  stoppedAt: number;
  drainedAt: number;
}

export interface LoadHandle {
  /** Every request that has ended so far (for progress lines); the same array `done` resolves with. */
  records: readonly RequestRecord[];
  /** Resolves when every loop has finished its last request. */
  done: Promise<LoadRun>;
  /** Stops sending new requests now (SIGINT); requests under way still finish. */
  stop(): void;
}

export function startLoad(o: LoadOptions): LoadHandle {
  const url = new URL("/v1/chat/completions", o.url);
  const agent = keepAliveAgent(url);
  const records: RequestRecord[] = [];
  const startedAt = Date.now();
  let stopAt = startedAt + o.durationMs;
  let sent = 0;

  const loop = async (index: number): Promise<void> => {
    let n = 0;
    while (Date.now() < stopAt && sent < o.maxRequests) {
      if (++sent === o.maxRequests) stopAt = Date.now();
      const record = await sendOne(url, agent, o.headers, requestBody(o, index, n++), o.timeoutMs);
      records.push(record);
      if (record.outcome === "early-error" && o.errorPauseMs > 0) await new Promise((r) => setTimeout(r, o.errorPauseMs));
    }
  };

  const done = Promise.all(Array.from({ length: o.connections }, (_, i) => loop(i))).then(() => {
    agent.destroy();
    return { records, startedAt, stoppedAt: stopAt, drainedAt: Date.now() };
  });
  return {
    records,
    done,
    stop: () => {
      stopAt = Math.min(stopAt, Date.now());
    },
  };
}
