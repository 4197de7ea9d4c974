import { URL_FIELDS } from "../openai/content-parts.ts";
import { CHARS_PER_TOKEN } from "../routing/learned/chars-per-token.ts";

/**
 * Media in a prompt: an image, audio or a file sent inline, as a data URL (what the openai SDKs
 * send for a local image) or base64 under one of these keys (`input_audio.data`, a file's
 * `file_data`). Its size says little of its tokens: a VLM turns a 1 MB photo into the same ~1k
 * tokens as a 100 KB one, and read as text its base64 was 250k tokens, which made its request's
 * backend look backed up for 25 s and put it 25 s behind every text prompt on a priority engine.
 */
const BINARY_KEYS: ReadonlySet<string> = new Set(["data", "file_data", "b64_json"]);
/**
 * A data URL's header (RFC 2397: `data:[<type>/<subtype>][;<parameter>]*,`): a text that only begins
 * with "data:" (a tool's output of SSE lines, `data: {...}`) is text. Anchored, so a megabyte
 * payload costs the few characters of its header.
 */
const DATA_URL = /^data:(?:[\w!#$&^.+-]+\/[\w!#$&^.+-]+)?(?:;[\w!#$&^.+=-]+)*,/i;

/** Whether a body's value under `key` is media, not prompt text: a data URL, or anything under a base64 key. */
export function isMedia(key: string, value: unknown): boolean {
  return BINARY_KEYS.has(key) || (typeof value === "string" && DATA_URL.test(value));
}

/**
 * What routing counts one media payload as, in tokens: one figure for any image, audio or file.
 * Between LLaVA-1.5's 576 tokens an image (336 px in 14 px patches) and Qwen2-VL's 1,280 at the
 * max_pixels its model card suggests (a token per 28×28 pixels); OpenAI bills a 1024×1024 image
 * 765 (85 + 170 per 512 px tile). Counted in characters at the ratio routing assumes before any
 * report, so a match on it turns into about that many cached tokens.
 */
export const MEDIA_TOKENS = 1024;
export const MEDIA_CHARS = MEDIA_TOKENS * CHARS_PER_TOKEN;

/** A payload longer than this is sampled, in SAMPLES windows of WINDOW characters spread from its start to its end. */
const SAMPLES = 32;
const WINDOW = 32;
/** Pads the stand-in; JSON escapes none of it, so its JSON is MEDIA_CHARS characters and its quotes. */
const PAD = "~";

/**
 * What the fingerprint hashes in a payload's place: its length and a bounded sample of it, padded
 * to MEDIA_CHARS. Equal media hash alike and different media, in practice, apart (another length,
 * or another byte in a 1 KB sample of compressed data), for the same few microseconds whether the
 * payload is 10 KB or 20 MB.
 */
function standIn(payload: string): string {
  let sample = payload;
  if (payload.length > SAMPLES * WINDOW) {
    sample = "";
    const step = (payload.length - WINDOW) / (SAMPLES - 1);
    for (let i = 0; i < SAMPLES; i++) {
      const at = Math.round(i * step);
      sample += payload.slice(at, at + WINDOW);
    }
  }
  return `media ${payload.length} ${sample}`.padEnd(MEDIA_CHARS, PAD);
}

/** A JSON.stringify replacer: each media string as its stand-in. A part with none serialises as JSON.stringify(part). */
const withStandIns = (key: string, value: unknown): unknown => (typeof value === "string" && isMedia(key, value) ? standIn(value) : value);

/** A content part (or a Responses item) as the fingerprint hashes it: its JSON, each media payload in it replaced by its stand-in. */
export function partJson(part: unknown): string {
  return JSON.stringify(part, withStandIns);
}

/**
 * The media of a prompt: how many payloads, inline or named by a URL, and their characters in the
 * body; `unhashed`, the characters the chain holds short of MEDIA_CHARS for them: a URL is hashed
 * as written (the same URL, the same prefix), so for each, MEDIA_CHARS less its length.
 */
export interface MediaSize {
  count: number;
  chars: number;
  unhashed: number;
}

export const NO_MEDIA: MediaSize = { count: 0, chars: 0, unhashed: 0 };

/** A part's fields that name media its engine fetches (src/openai/content-parts.ts): `{"url": …}`, or the URL itself. */
const MEDIA_URL_KEYS: ReadonlySet<string> = new Set(URL_FIELDS);

/**
 * The media of a chat body's messages or a Responses body's input, read where the fingerprint reads
 * parts as their JSON (partJson): a message's parts with no text, a Responses item with no role.
 * The whole prompt, past where the chain was cut: its size in blocks (promptBlocks) counts each as
 * MEDIA_CHARS, not as its bytes or its URL. A message whose content is a string costs a type check.
 */
export function mediaOf(turns: unknown): MediaSize {
  if (!Array.isArray(turns)) return NO_MEDIA;
  const size = { count: 0, chars: 0, unhashed: 0 };
  for (const turn of turns) {
    if (!isRecord(turn)) continue;
    if (turn.role === undefined) tally(turn, "", size);
    else if (Array.isArray(turn.content)) for (const part of turn.content) if (isRecord(part) && typeof part.text !== "string") tally(part, "", size);
  }
  return size.count > 0 ? size : NO_MEDIA;
}

/**
 * Adds the media under `value` to `size`: inline, as withStandIns finds them; by URL, a string
 * under a media URL field or its `url`. An engine spends an image's tokens however it came, and
 * counted as its URL's few characters, twenty images went to a priority engine ahead of others'
 * 2k-token prompts. The body's depth is bounded (src/openai/body-shape.ts).
 */
function tally(value: unknown, key: string, size: MediaSize): void {
  if (typeof value === "string") {
    if (isMedia(key, value)) add(size, value, false);
    else if (MEDIA_URL_KEYS.has(key)) add(size, value, true);
  } else if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) tally(value[i], String(i), size);
  } else if (isRecord(value)) {
    if (MEDIA_URL_KEYS.has(key) && typeof value.url === "string" && !isMedia("url", value.url)) add(size, value.url, true);
    for (const k in value) tally(value[k], k, size);
  }
}

function add(size: MediaSize, payload: string, byUrl: boolean): void {
  size.count++;
  size.chars += payload.length;
  if (byUrl) size.unhashed += Math.max(0, MEDIA_CHARS - payload.length);
}

function isRecord(v: unknown): v is Readonly<Record<string, unknown>> {
  return typeof v === "object" && v !== null;
}
