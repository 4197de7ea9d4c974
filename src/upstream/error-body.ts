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

/** `body` parsed, each of its strings without the secrets; null if it is no JSON. */
function parsed(body: string | null, secrets: readonly string[]): unknown {
  if (body === null) return null;
  try {
    return secrets.length === 0 ? JSON.parse(body) : JSON.parse(body, (_key, v: unknown) => (typeof v === "string" ? withoutSecrets(v, secrets) : v));
  } catch {
    return null;
  }
}

/**
 * `text` with its end made good as a fragment of a cut string, once its whole secrets are out: a
 * secret cut at the end is a prefix of it, which no replacement would find.
 */
function withoutCutSecret(text: string, secrets: readonly string[]): string {
  text = withoutSecrets(text, secrets);
  for (const secret of secrets) {
    for (let n = Math.min(secret.length - 1, text.length); n > 0; n--) {
      if (text.endsWith(secret.slice(0, n))) {
        text = text.slice(0, -n);
        break;
      }
    }
  }
  return text;
}

const SCALAR = /-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null/y;
/** What may follow a whole scalar in JSON. */
const VALUE_END = /[\s,\]}]/;
/** Longest scalar a cut can leave unfinished but for a number's digits: `false` less a letter. */
const CUT_SCALAR = 4;

/**
 * A JSON object cut at a byte bound (readBounded's), closed where it was cut: what came whole
 * before the cut, and a string value the cut fell in up to its last whole character, with the
 * containers it was in closed after it. A server's error body is past the bound when its message
 * echoes the request (vLLM's and SGLang's 400 for a body that fails validation hold the whole
 * body, twice): its message, first, is what says why. A key or a scalar the cut fell in is
 * dropped. null for text that is no JSON object's beginning (HTML, a traceback).
 */
export function closeCutJson(text: string, secrets: readonly string[] = []): string | null {
  const closers: string[] = [];
  // Where the text read so far is whole, and what then closes it.
  let whole = -1;
  let closing = "";
  const mark = (at: number) => {
    whole = at;
    closing = closers.toReversed().join("");
  };
  let keyNext = false;
  let i = text.search(/\S/);
  if (text[i] !== "{") return null;
  while (i < text.length) {
    const c = text[i] as string;
    if (c === '"') {
      const isKey = keyNext;
      const from = i;
      let escape = -1;
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === "\\") escape = i++;
      }
      if (i < text.length) {
        if (!isKey) mark(i + 1);
        i++;
        continue;
      }
      if (isKey) break;
      // The cut fell in this string value: it ends at its last whole character, not in an escape.
      const cutEscape = escape >= 0 && (escape + 1 >= text.length || (text[escape + 1] === "u" && escape + 6 > text.length));
      const value = parsed(`"${text.slice(from + 1, cutEscape ? escape : text.length)}"`, []);
      if (typeof value !== "string") break;
      return text.slice(0, from) + JSON.stringify(withoutCutSecret(value, secrets)) + closers.toReversed().join("");
    }
    if (c === "{" || c === "[") {
      closers.push(c === "{" ? "}" : "]");
      keyNext = c === "{";
      mark(++i);
    } else if (c === "}" || c === "]") {
      closers.pop();
      // Whole, and what follows it is not JSON: the object is what was meant.
      if (closers.length === 0) return text.slice(0, i + 1);
      keyNext = false;
      mark(++i);
    } else if (c === ":" || c === ",") {
      keyNext = c === "," && closers.at(-1) === "}";
      i++;
    } else if (/\s/.test(c)) {
      i++;
    } else {
      SCALAR.lastIndex = i;
      const scalar = SCALAR.exec(text);
      if (!scalar) {
        if (text.length - i <= CUT_SCALAR) break;
        return null;
      }
      i += scalar[0].length;
      // A number the cut fell in may have lost digits (`40.` of 40.5, `1e` of 1e3): whole only
      // when what follows it ends a value.
      if (i < text.length && VALUE_END.test(text[i] as string)) mark(i);
    }
  }
  return whole < 0 ? null : text.slice(0, whole) + closing;
}

/**
 * `secrets`: what the gateway sent the upstream that is secret (its bearer key, its secret
 * headers' values). A server or a proxy in front of it may echo the request's headers in its
 * error (a debug handler, a misconfigured proxy): they are taken out of every string of it as it
 * is parsed — however its encoder escaped them (`\u003d` for `=`, `\/`) — before any of it is
 * read, so no part of them reaches a client or a log line, cut at a bound or not.
 */
export function parseUpstreamError(body: string, secrets: readonly string[] = []): UpstreamErrorBody | null {
  const j = parsed(body, secrets) ?? parsed(closeCutJson(body, secrets), secrets);
  return isRecord(j) ? errorFields(j, secrets) : null;
}

/**
 * What a stream's error event said (its data; src/stream/first-bytes.ts finds it), secrets taken
 * out as parseUpstreamError takes them: chat's shapes are an error body's; the Responses API's
 * `error` event has its fields at the top level beside its own `type` and `sequence_number`
 * (OpenAI's; or in `error`), and `response.failed` has them in its response's `error`.
 */
export function parseErrorEvent(data: string, secrets: readonly string[] = []): UpstreamErrorBody | null {
  const j = parsed(data, secrets);
  if (!isRecord(j)) return null;
  if (j.type === "response.failed") return isRecord(j.response) && isRecord(j.response.error) ? errorFields(j.response.error, secrets) : null;
  if (j.type === "error" && !isRecord(j.error)) {
    const { type: _event, sequence_number: _seq, ...fields } = j;
    return errorFields(fields, secrets);
  }
  return errorFields(j, secrets);
}

/** The fields of an error's JSON, an error body's or an event's. */
function errorFields(j: Json, secrets: readonly string[]): UpstreamErrorBody | null {
  // The fields live in `error` when it is an object, else at the top level.
  const f = isRecord(j.error) ? j.error : j;
  const message = text(f.message, MAX_MESSAGE_CHARS) ?? text(j.error, MAX_MESSAGE_CHARS) ?? detailMessage(j.detail);
  const type = text(f.type, MAX_EXTRA_STRING_CHARS) ?? text(j.error_type, MAX_EXTRA_STRING_CHARS);
  const code = typeof f.code === "number" ? f.code : text(f.code, MAX_EXTRA_STRING_CHARS);
  const param = text(f.param, MAX_EXTRA_STRING_CHARS);
  if (message === null && type === null && code === null) return null;
  return { message, type, code, param, extra: extras(f, secrets) };
}
