import { privateOnlyHost } from "../config/private-hosts.ts";
import type { Endpoint } from "./endpoints.ts";
import { partSteering, steeringRefusal } from "./engine-steering.ts";
import { badRequest, type GatewayError } from "./errors.ts";
import { SCORE_SIDES } from "./requests.ts";

/**
 * A content part's fields whose URL an engine fetches itself: vLLM's MediaConnector GETs an
 * `image_url`, `audio_url` or `video_url` (`{"url": …}`, or a bare string in vLLM's untyped parts
 * and in the Responses API's `input_image`), SGLang alike, and a Responses `input_file` names its
 * `file_url`. They are read whatever the part's `type` says: vLLM reads the untyped form off a part
 * that carries a `uuid`, typed or not. The fetch leaves from inside the GPU network, by default
 * to any host: from a tenant, a link-local address is the cloud's metadata service, and the
 * engine's error and its timing tell "refused", "timed out" and "not an image" apart, enough to
 * scan the private network's ports.
 */
export const URL_FIELDS = ["image_url", "audio_url", "video_url", "file_url"] as const;

/** The fields of a rerank or score request that may be vLLM's multimodal object, `{"content": [parts]}`. */
const RERANK_FIELDS = ["query", "documents"] as const;
const SCORE_FIELDS = [...new Set(SCORE_SIDES.flat())];

/**
 * The 400 for a virtual key's body whose content parts hold what a tenant may not send, or null: a
 * media URL an engine would fetch from the deployment's own network, or a part's field that steers
 * the engine (engine-steering.ts partSteering: a tensor to deserialize, its own image tiling). Read
 * on the body already parsed and never re-serialised, in the one walk of its parts (partsFound). A
 * `data:` URL, a public host's, or a value that is no URL (SGLang takes bare base64) passes.
 */
export function contentPartRefusal(endpoint: Endpoint, body: Readonly<Record<string, unknown>>): GatewayError | null {
  const found = partsFound(endpoint, body, partFound);
  return found && found.error(found.path);
}

/** Calls `visit` with each of a body's content parts, those partsFound walks: where media may sit (src/prefix/media.ts). */
export function forEachPart(endpoint: Endpoint, body: Readonly<Record<string, unknown>>, visit: (part: Readonly<Record<string, unknown>>) => void): void {
  partsFound(endpoint, body, visiting(visit));
}

/** A part's finding: its path in the body, built only once something is found, and the error it is. */
interface Found {
  path: string;
  error: (param: string) => GatewayError;
}

type PartCheck = (part: unknown) => Found | null;

/**
 * The first of a body's content parts `check` finds something in, its path from the body's root:
 * the one walk of where a body holds parts. Only what holds them is walked (chat and embeddings
 * messages' content, Responses input items, their content and a tool's output given as parts,
 * rerank and score multimodal objects), once: a string content costs one type check. Nowhere else
 * (a tool's schema, a message's text) holds a part an engine reads.
 */
function partsFound(endpoint: Endpoint, body: Readonly<Record<string, unknown>>, check: PartCheck): Found | null {
  switch (endpoint) {
    case "chat":
    case "embeddings":
      return under("messages", itemsFound(body.messages, (message) => listedFound(message, "content", check)));
    case "responses":
      return under("input", itemsFound(body.input, (item) => itemFound(item, check)));
    case "rerank":
      return sidesFound(body, RERANK_FIELDS, check);
    case "score":
      return sidesFound(body, SCORE_FIELDS, check);
    case "completions":
      return null;
  }
}

/** Calls `visit` with a Responses input item's parts, those partsFound walks: the item itself, its content's, a tool's output's. */
export function forEachItemPart(item: unknown, visit: (part: Readonly<Record<string, unknown>>) => void): void {
  itemFound(item, visiting(visit));
}

/** A check that finds nothing: it visits each object part. */
function visiting(visit: (part: Readonly<Record<string, unknown>>) => void): PartCheck {
  return (part) => {
    if (isObject(part)) visit(part);
    return null;
  };
}

/**
 * A Responses input item: an item that is a part itself, a message with content parts, or a tool's
 * output given as parts, or as one part: a computer call's screenshot (`{"type":
 * "computer_screenshot", "image_url": …}`), a function's one `input_image`. An output that is text
 * holds none.
 */
function itemFound(item: unknown, check: PartCheck): Found | null {
  return check(item) ?? listedFound(item, "content", check) ?? listedFound(item, "output", check) ?? outputPartFound(item, check);
}

function outputPartFound(item: unknown, check: PartCheck): Found | null {
  const output = isObject(item) ? item.output : undefined;
  const found = isObject(output) ? check(output) : null;
  return found && { path: `.output${found.path}`, error: found.error };
}

function under(at: string, found: Found | null): Found | null {
  return found && { path: at + found.path, error: found.error };
}

function itemsFound(list: unknown, check: PartCheck): Found | null {
  if (!Array.isArray(list)) return null;
  for (let i = 0; i < list.length; i++) {
    const found = check(list[i]);
    if (found) return { path: `[${i}]${found.path}`, error: found.error };
  }
  return null;
}

/**
 * An object that may be a part or hold parts. An array is none: no engine reads one as a content
 * part, no schema walks what a rerank, score or tool output's `content` holds, and read as a part
 * an array of 2 million numbers had partSteering's `for…in` list 2 million indices as strings.
 */
function isObject(v: unknown): v is Readonly<Record<string, unknown>> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The parts listed under `key` of `holder` (a message's or a multimodal object's `content`, a tool's `output`); a string there has none. */
function listedFound(holder: unknown, key: "content" | "output", check: PartCheck): Found | null {
  if (!isObject(holder)) return null;
  const found = itemsFound(holder[key], check);
  return found && { path: `.${key}${found.path}`, error: found.error };
}

function sidesFound(body: Readonly<Record<string, unknown>>, fields: readonly string[], check: PartCheck): Found | null {
  for (const field of fields) {
    const found = under(field, listedFound(body[field], "content", check));
    if (found) return found;
  }
  return null;
}

/** A part's first field a virtual key may not set: a media URL an engine would fetch from the deployment's network, or a field that steers the engine (engine-steering.ts). */
function partFound(part: unknown): Found | null {
  if (!isObject(part)) return null;
  for (const field of URL_FIELDS) {
    const v = part[field];
    const bare = typeof v === "string";
    const url = bare ? v : isObject(v) && typeof v.url === "string" ? v.url : null;
    const why = url === null ? null : unfetchable(url);
    if (why) return { path: bare ? `.${field}` : `.${field}.url`, error: (param) => refusal(param, why) };
  }
  const steers = partSteering(part);
  return steers && { path: steers.path, error: (param) => steeringRefusal(param, steers.why) };
}

const refusal = (param: string, why: string): GatewayError =>
  badRequest(`${param} is not accepted from a virtual key: ${why} (a data: URL, or a public host's, is accepted)`, param, "invalid_value");

/** An http(s) URL WHATWG cannot parse (an out-of-range port, a space in its host): Python's parsers may still fetch it. */
const HTTP_LIKE = /^[\s\x00-\x1f]*https?:/i;
/**
 * An http(s) URL with a backslash before its path: WHATWG ends the host at it, Python's parsers
 * (urllib, yarl before its fix) do not, and take the host after the last @ — `cdn.example.com\@10.0.0.5`.
 */
const BACKSLASH_IN_AUTHORITY = /^[\s\x00-\x1f]*https?:[/\\]*[^/?#]*\\/i;
/**
 * A value that is no URL but a file's path: SGLang opens a string ending in a media extension, or
 * naming a path, on its own disk. Bare base64 (SGLang's other form) holds no "." or "~" and no
 * character outside its alphabet, and the smallest JPEG's (which starts with a slash) is longer
 * than 128 characters. (A long path of base64's characters alone, /etc/passwd padded with slashes,
 * still passes: one that ends in a media extension does not.)
 */
const PATH_LIKE = /^(?:\.{1,2}[/\\]|~|\/[^\s]{0,127}$|\/.*[^A-Za-z0-9+/=\r\n])|(?:^|[/\\])\.\.(?:[/\\]|$)|\.[a-z0-9]{2,5}$/i;
/** What WHATWG's URL parser and Python's (urlsplit, yarl) both take out of a URL, wherever it is: a scheme split by one is read whole. */
const DROPPED = /[\t\n\r]/g;

const DATA = "data:";

/** Whether a media field's value is its payload inline. A data: URL may be megabytes: told by its first five characters, as vLLM tells it, never parsed. */
export function isDataUrl(url: string): boolean {
  return url.length >= DATA.length && url.slice(0, DATA.length).toLowerCase() === DATA;
}

/**
 * Why a tenant may not have an engine fetch `url`, or null. The URL parser puts a host as the
 * fetch would reach it (2852039166 and 0xa9.254.0251.254 are 169.254.169.254), and
 * `privateOnlyHost` judges that. A public name that resolves to a private address passes: only
 * the engine, which resolves it, can refuse that (README, below the table of response headers).
 */
export function unfetchable(url: string): string | null {
  if (isDataUrl(url)) return null;
  const parsed = URL.parse(url);
  if (parsed === null) return UNPARSED_REFUSALS[unparsedForm(url)];
  if (parsed.protocol === "file:") return "a file: URL is read off the engine's own disk";
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return null;
  const why = privateOnlyHost(parsed.hostname);
  if (why) return `its host ${parsed.hostname} is ${why}, which an engine would fetch from inside the deployment's network`;
  return BACKSLASH_IN_AUTHORITY.test(url.replace(DROPPED, "")) ? "it has a backslash before its path, where an engine's URL parser may read another host than this gateway's" : null;
}

/** What an engine takes a media field's value that is no URL for: an http URL its own parser may still fetch, a file SGLang opens, or bare base64 (SGLang's other form). */
type Unparsed = "http" | "path" | "base64";

/** Why each form of a value that is no URL is refused, or null: bare base64 is the payload itself. */
const UNPARSED_REFUSALS: Readonly<Record<Unparsed, string | null>> = {
  http: "it starts as an http URL but cannot be parsed as one, and an engine's own parser may still fetch it",
  path: "it names a path on the engine's own disk, which SGLang opens",
  base64: null,
};

function unparsedForm(value: string): Unparsed {
  if (HTTP_LIKE.test(value.replace(DROPPED, ""))) return "http";
  return PATH_LIKE.test(value) ? "path" : "base64";
}

/** How much of a value isBareBase64 reads: past PATH_LIKE's 128-character short path, and a few microseconds however long the payload. */
const BASE64_HEAD = 1024;

/**
 * Whether a media field's value is bare base64, the payload inline as SGLang takes it: no URL, as
 * unfetchable tells it. Told by its first BASE64_HEAD characters, as a data URL by its first five:
 * it may be megabytes. (A longer path of base64's characters that ends in an extension is told a
 * payload here; unfetchable reads it whole.)
 */
export function isBareBase64(value: string): boolean {
  const head = value.slice(0, BASE64_HEAD);
  return URL.parse(head) === null && unparsedForm(head) === "base64";
}
