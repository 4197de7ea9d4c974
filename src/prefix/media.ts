import { forEachItemPart, forEachPart, isBareBase64, isDataUrl, URL_FIELDS } from "../openai/content-parts.ts";
import type { Endpoint } from "../openai/endpoints.ts";
import { CHARS_PER_TOKEN } from "../routing/learned/chars-per-token.ts";

/**
 * Media in a prompt: an image, audio, video or file, told by its place in a content part as the
 * OpenAI and vLLM request shapes define it, never by a string's shape. A URL field
 * (src/openai/content-parts.ts URL_FIELDS: `{"url": …}`, or the URL itself) holds a URL its engine
 * fetches or the payload inline as a data URL (what the openai SDKs send for a local image) or as
 * bare base64 (SGLang's);
 * `input_audio.data`, a chat file's `file.file_data` and a Responses input_file's `file_data` hold
 * base64. Its size says little of its tokens: a VLM turns a 1 MB photo into the same ~1k tokens as
 * a 100 KB one, and read as text its base64 was 250k tokens, which made its request's backend look
 * backed up for 25 s and put it 25 s behind every text prompt on a priority engine. Every other
 * string is text the engine reads — a message's content, a text part, a tool's schema, arguments
 * or output — however it begins: told by shape, 40k characters after `data:,` were charged as 3
 * tokens and hashed as one image.
 */
type Place = readonly [field: string, key: string | null];
/** A part's media fields, each with the key of its payload inside it (null: the field's value is the payload). */
const PLACES: readonly Place[] = [...URL_FIELDS.flatMap((f): Place[] => [[f, null], [f, "url"]]), ["input_audio", "data"], ["file", "file_data"], ["file_data", null]];
const URL_KEYS: ReadonlySet<string> = new Set(URL_FIELDS);

function payloadAt(part: Readonly<Record<string, unknown>>, [field, key]: Place): string | undefined {
  const held = part[field];
  const v = key === null ? held : isRecord(held) ? held[key] : undefined;
  return typeof v === "string" ? v : undefined;
}

/**
 * Whether a payload is sent in the body: base64 always, a URL field's as a data URL, or as bare
 * base64 longer than its stand-in (SGLang's form; a shorter one, hashed as written, takes no more of
 * the chain). Else the engine fetches it, or opens it on its disk, and it is hashed as written.
 */
function isInline([field]: Place, payload: string): boolean {
  return !URL_KEYS.has(field) || isDataUrl(payload) || (payload.length > MEDIA_CHARS && isBareBase64(payload));
}

/** Calls `visit` with each media payload of a content part, and whether it came inline. */
function eachMedia(part: Readonly<Record<string, unknown>>, visit: (payload: string, inline: boolean) => void): void {
  for (const place of PLACES) {
    const payload = payloadAt(part, place);
    if (payload !== undefined) visit(payload, isInline(place, payload));
  }
}

/**
 * The characters of a body's media, in the parts the gateway reads (content-parts.ts forEachPart):
 * what an estimate leaves out of its prompt's text (src/tenants/estimate.ts).
 */
export function mediaChars(endpoint: Endpoint, body: Readonly<Record<string, unknown>>): number {
  let chars = 0;
  forEachPart(endpoint, body, (part) => eachMedia(part, (payload) => (chars += payload.length)));
  return chars;
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

/** A part with each payload it holds inline as its stand-in: the part itself when it holds none. */
function withStandIns(part: Readonly<Record<string, unknown>>): Readonly<Record<string, unknown>> {
  let swapped: Record<string, unknown> | null = null;
  for (const place of PLACES) {
    const payload = payloadAt(part, place);
    if (payload === undefined || !isInline(place, payload)) continue;
    const [field, key] = place;
    swapped ??= { ...part };
    swapped[field] = key === null ? standIn(payload) : { ...(part[field] as Readonly<Record<string, unknown>>), [key]: standIn(payload) };
  }
  return swapped ?? part;
}

/** A content part as the fingerprint hashes it: its JSON, each payload it holds inline as its stand-in. */
export function partJson(part: unknown): string {
  return JSON.stringify(isPart(part) ? withStandIns(part) : part);
}

/**
 * A Responses item that is no message as the fingerprint hashes it: its JSON, each payload inline in
 * its parts (content-parts.ts forEachItemPart: itself, its content's, a tool output's) as its
 * stand-in. An item with none (a function call, its text output) serialises as JSON.stringify(item).
 */
export function itemJson(item: unknown): string {
  const swaps = new Map<unknown, unknown>();
  forEachItemPart(item, (part) => {
    const swapped = withStandIns(part);
    if (swapped !== part) swaps.set(part, swapped);
  });
  return swaps.size === 0 ? JSON.stringify(item) : JSON.stringify(item, (_, v: unknown) => swaps.get(v) ?? v);
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

/**
 * The media of a chat body's messages or a Responses body's input, in the parts the fingerprint
 * reads as their JSON (partJson, itemJson): a message's parts with no text, a Responses item with
 * no role and its parts. The whole prompt, past where the chain was cut: its size in blocks
 * (promptBlocks) counts each as MEDIA_CHARS, not as its bytes or its URL — an engine spends an
 * image's tokens however it came, and counted as its URL's few characters, twenty images went to a
 * priority engine ahead of others' 2k-token prompts. A message whose content is a string costs a
 * type check.
 */
export function mediaOf(turns: unknown): MediaSize {
  if (!Array.isArray(turns)) return NO_MEDIA;
  const size = { count: 0, chars: 0, unhashed: 0 };
  const add = (payload: string, inline: boolean): void => {
    size.count++;
    size.chars += payload.length;
    if (!inline) size.unhashed += Math.max(0, MEDIA_CHARS - payload.length);
  };
  for (const turn of turns) {
    if (!isRecord(turn)) continue;
    if (turn.role === undefined) forEachItemPart(turn, (part) => eachMedia(part, add));
    else if (Array.isArray(turn.content)) for (const part of turn.content) if (isPart(part) && typeof part.text !== "string") eachMedia(part, add);
  }
  return size.count > 0 ? size : NO_MEDIA;
}

function isRecord(v: unknown): v is Readonly<Record<string, unknown>> {
  return typeof v === "object" && v !== null;
}

/** An object that may be a content part: no array is one (content-parts.ts). */
function isPart(v: unknown): v is Readonly<Record<string, unknown>> {
  return isRecord(v) && !Array.isArray(v);
}
