import { clipName, type LogLevel } from "../config/schema.ts";
import { maskedKeys } from "../tenants/key-format.ts";
import type { TokenUsage } from "../routing/protocol.ts";
import type { FailureKind } from "../upstream/answer.ts";
import { atLeast } from "./event-log.ts";

/** The request line's fields: snake_case and stable, since dashboards and Logpush jobs read them. */
export interface RequestLine {
  type: "request";
  /** When the request came in. */
  time: string;
  level: LogLevel;
  request_id: string;
  /** A virtual key's id, "master", or null when the caller was not authenticated. */
  key_id: string | null;
  method: string;
  path: string;
  model: string | null;
  group: string | null;
  backend: string | null;
  reason: string | null;
  matched_blocks: number | null;
  total_blocks: number | null;
  attempts: number;
  status: number;
  /** From the request's arrival to the upstream's first byte, as the client waited for it. */
  ttft_ms: number | null;
  /** From the request's arrival to its end: the last byte of a relayed body, or the answer. */
  duration_ms: number | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  cached_tokens: number | null;
  error_code: string | null;
  stream: boolean;
  /** The attempts that failed before an answer, in order: each one's group, backend and what it met; null when none did. */
  failures: AttemptFailureField[] | null;
}

export interface AttemptFailureField {
  group: string;
  backend: string;
  cause: FailureKind;
}

export interface RequestLogSettings {
  sampleRate: number;
  level: LogLevel;
}

/**
 * One request's line, filled in as the request goes and written once, when it has ended: when it
 * is answered, or — for a relayed body — when that body ended, whichever comes last. Whoever
 * relays a body says so (`awaitBody`) before the answer goes out.
 */
export class RequestLog {
  private readonly line: RequestLine;
  private readonly startedAt: number;
  private readonly min: LogLevel;
  /** The arrival's wall-clock time, formatted only when the line is written (after the response). */
  private readonly arrivedAt = Date.now();
  private waits = 1;

  constructor(requestId: string, method: string, path: string, startedAt: number, min: LogLevel) {
    this.startedAt = startedAt;
    this.min = min;
    this.line = {
      type: "request", time: "", level: "info", request_id: requestId, key_id: null, method, path: maskedKeys(path),
      model: null, group: null, backend: null, reason: null, matched_blocks: null, total_blocks: null, attempts: 0, status: 0,
      ttft_ms: null, duration_ms: null, prompt_tokens: null, completion_tokens: null, cached_tokens: null, error_code: null, stream: false, failures: null,
    };
  }

  asked(model: string, stream: boolean): void {
    this.line.model = clipName(maskedKeys(model));
    this.line.stream = stream;
  }

  /** The attempt going out: the last one's routing is the request's. */
  routed(group: string, backend: string, reason: string, matched: number, total: number, attempts: number): void {
    const l = this.line;
    l.group = group;
    l.backend = backend;
    l.reason = reason;
    l.matched_blocks = matched;
    l.total_blocks = total;
    l.attempts = attempts;
  }

  /** An attempt failed before any byte reached the client (rare: the list is made then). */
  failed(group: string, backend: string, cause: FailureKind): void {
    (this.line.failures ??= []).push({ group, backend, cause });
  }

  /** The upstream's first byte, `firstByteAt` on the request's clock; and its usage, when it was read. */
  served(firstByteAt: number | null, usage: TokenUsage | undefined): void {
    if (firstByteAt !== null) this.line.ttft_ms = round(firstByteAt - this.startedAt);
    if (usage) {
      this.line.prompt_tokens = usage.prompt;
      this.line.completion_tokens = usage.completion;
      this.line.cached_tokens = usage.cached;
    }
  }

  /** The answer's body is relayed: the line waits for its end too. */
  awaitBody(): void {
    this.waits++;
  }

  /** Whether the line waits for a relayed body's end: noting the answer then writes nothing. */
  get waitsForBody(): boolean {
    return this.waits > 1;
  }

  /**
   * A relayed body ended at `now`; `errorCode` when it was cut (the stream's error event's code, or
   * the client's leaving). A cut after the 200 is the failure it would have been before the headers,
   * and its line has that answer's level: a level filter keeping only failures keeps it.
   */
  bodyEnded(now: number, errorCode: string | null): void {
    if (errorCode !== null) {
      this.line.error_code = errorCode;
      this.raise(levelOf(CUT_STATUS[errorCode] ?? 502));
    }
    this.end(now);
  }

  /** The answer went out, at `now`: its status, who called, the error code of an error answer. */
  answered(now: number, status: number, keyId: string | null, errorCode: string | null): void {
    const l = this.line;
    l.status = status;
    l.key_id = keyId;
    if (errorCode !== null) l.error_code = errorCode;
    this.raise(levelOf(status));
    this.end(now);
  }

  /** The line's level is the worst of what the request met: its answer, and its body's end (either may come first). */
  private raise(level: LogLevel): void {
    if (atLeast(level, this.line.level)) this.line.level = level;
  }

  private end(now: number): void {
    if (--this.waits > 0) return;
    if (!atLeast(this.line.level, this.min)) return;
    this.line.duration_ms = round(now - this.startedAt);
    this.line.time = new Date(this.arrivedAt).toISOString();
    console.log(JSON.stringify(this.line));
  }
}

/** The request's log, or null for one not sampled: decided once, when it comes in. */
export function sampleRequest(s: RequestLogSettings, requestId: string, method: string, path: string, startedAt: number): RequestLog | null {
  if (s.sampleRate < 1 && !(Math.random() < s.sampleRate)) return null;
  return new RequestLog(requestId, method, path, startedAt, s.level);
}

/** A 2xx is info, a 4xx warn, a 5xx error. */
const levelOf = (status: number): LogLevel => (status >= 500 ? "error" : status >= 400 ? "warn" : "info");

/**
 * The answer a body's cut stands for, had it come before the headers: a client that left is a 499,
 * an upstream that broke off a 502, one that stalled a 504. A code not listed is an upstream's failure.
 */
const CUT_STATUS: Readonly<Record<string, number>> = { client_closed_request: 499, upstream_stream_error: 502, upstream_stream_stalled: 504 };

const round = (ms: number) => Math.round(ms * 100) / 100;
