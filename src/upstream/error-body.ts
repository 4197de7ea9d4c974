import type { ErrorExtra } from "../openai/errors.ts";

/**
 * What an upstream said in an error body, when it said it in JSON. Inference servers disagree on
 * the shape: OpenAI and llama.cpp send `{"error":{"message","type","code",…}}`, vLLM sends the
 * fields at the top level with `"object":"error"`, TGI `{"error":"…","error_type":"…"}`, FastAPI
 * `{"detail":…}`. Anything else (HTML, a traceback, plain text) yields null: its text never
 * reaches a client.
 */
export interface UpstreamErrorBody {
  message: string | null;
  type: string | null;
  code: string | number | null;
  param: string | null;
  /** Further scalar fields (llama.cpp's `n_prompt_tokens`, `n_ctx`), a few and short. */
  extra: Record<string, ErrorExtra>;
}

/** Longest upstream message a client gets; a server's message is a sentence, not a dump. */
export const MAX_MESSAGE_CHARS = 1000;
const MAX_EXTRA_FIELDS = 8;
const MAX_EXTRA_KEY_CHARS = 64;
const MAX_EXTRA_STRING_CHARS = 200;
const STANDARD = new Set(["message", "type", "code", "param", "object", "error", "error_type", "detail"]);

type Json = Record<string, unknown>;
/** What stands for a secret taken out. */
export const REDACTED = "[redacted]";

/** `text` with each secret replaced. */
export function withoutSecrets(text: string, secrets: readonly string[]): string {
  for (const secret of secrets) text = text.replaceAll(secret, REDACTED);
  return text;
}

const isRecord = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

function text(v: unknown, max: number): string | null {
  return typeof v === "string" && v !== "" ? v.slice(0, max) : null;
}

/** FastAPI's `detail`: a string, or a list of validation errors each with a `msg`. */
function detailMessage(detail: unknown): string | null {
  if (typeof detail === "string") return text(detail, MAX_MESSAGE_CHARS);
  if (Array.isArray(detail) && isRecord(detail[0])) return text(detail[0].msg, MAX_MESSAGE_CHARS);
  return null;
}

function extras(fields: Json, secrets: readonly string[]): Record<string, ErrorExtra> {
  const out: Record<string, ErrorExtra> = {};
  let n = 0;
  for (const [k, v] of Object.entries(fields)) {
    if (n === MAX_EXTRA_FIELDS) break;
    if (STANDARD.has(k) || k.length > MAX_EXTRA_KEY_CHARS || k === "__proto__" || secrets.some((x) => k.includes(x))) continue;
    if (typeof v === "string") out[k] = v.slice(0, MAX_EXTRA_STRING_CHARS);
    else if (typeof v === "number" || typeof v === "boolean" || v === null) out[k] = v;
    else continue;
    n++;
  }
  return out;
}

/**
 * `secrets`: what the gateway sent the upstream that is secret (its bearer key, its secret
 * headers' values). A server or a proxy in front of it may echo the request's headers in its
 * error (a debug handler, a misconfigured proxy): they are taken out of every string of it as it
 * is parsed — however its encoder escaped them (`\u003d` for `=`, `\/`) — before any of it is
 * read, so no part of them reaches a client or a log line, cut at a bound or not.
 */
export function parseUpstreamError(body: string, secrets: readonly string[] = []): UpstreamErrorBody | null {
  let j: unknown;
  try {
    j = secrets.length === 0 ? JSON.parse(body) : JSON.parse(body, (_key, v: unknown) => (typeof v === "string" ? withoutSecrets(v, secrets) : v));
  } catch {
    return null;
  }
  if (!isRecord(j)) return null;
  // The fields live in `error` when it is an object, else at the top level.
  const f = isRecord(j.error) ? j.error : j;
  const message = text(f.message, MAX_MESSAGE_CHARS) ?? text(j.error, MAX_MESSAGE_CHARS) ?? detailMessage(j.detail);
  const type = text(f.type, MAX_EXTRA_STRING_CHARS) ?? text(j.error_type, MAX_EXTRA_STRING_CHARS);
  const code = typeof f.code === "number" ? f.code : text(f.code, MAX_EXTRA_STRING_CHARS);
  const param = text(f.param, MAX_EXTRA_STRING_CHARS);
  if (message === null && type === null && code === null) return null;
  return { message, type, code, param, extra: extras(f, secrets) };
}
