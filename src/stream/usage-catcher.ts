import { join } from "./bytes.ts";

/**
 * Catching a relayed non-streamed body's `usage` object as its bytes pass, wherever it lies: a
 * body too large to hold whole (or of unknown size) keeps only its first and last 8 KiB
 * (BodyEnds), and vLLM puts a chat answer's usage between its `choices` (tens of KiB with
 * logprobs) and its `prompt_logprobs` or `prompt_token_ids` (hundreds of KiB). Each catcher holds a
 * few bytes across a chunk boundary and, once it found the object, that object's bytes until it
 * closes, up to USAGE_OBJECT_MAX_BYTES: never the body.
 */

/** The most a usage object is held to (its counts and their details are a few hundred bytes); a larger one is let go. */
export const USAGE_OBJECT_MAX_BYTES = 4096;

const MARKER = '"usage"';

/**
 * What a body's usage is caught by: `push` each chunk in order, then `caught()` is the text of the
 * usage object found (the last one whole), or null.
 */
export interface UsageCatcher {
  push(chunk: Uint8Array): void;
  caught(): string | null;
}

/**
 * The last `"usage": {…}` anywhere in the body, found by a native search of each chunk's text.
 * For an answer whose every client-given or generated string is a JSON string value (a chat or
 * text completion, an embeddings or rerank answer): inside one, a quote is escaped (`\"usage\"`),
 * so the marker followed by a colon and an object is a key the server wrote (readUsage reasons so
 * for the kept ends). Not for a Responses answer, which repeats the client's tool schemas
 * (TopLevelUsage).
 */
export class MarkedUsage implements UsageCatcher {
  private readonly decoder = new TextDecoder();
  /** The text carried to the next chunk: a marker's possible start, or a candidate's whole text from its marker. */
  private held = "";
  private last: string | null = null;

  push(chunk: Uint8Array): void {
    const text = this.held + this.decoder.decode(chunk, { stream: true });
    this.held = "";
    let from = 0;
    for (;;) {
      const at = text.indexOf(MARKER, from);
      if (at < 0) {
        // A marker may begin in the last few characters and end in the next chunk.
        this.held = text.slice(Math.max(from, text.length - (MARKER.length - 1)));
        return;
      }
      const found = objectAfter(text, at + MARKER.length);
      if (found === INCOMPLETE) {
        // Held until it closes, unless it outgrew a usage object (it is then no usage).
        if (text.length - at <= USAGE_OBJECT_MAX_BYTES) this.held = text.slice(at);
        else from = at + 1;
        if (this.held !== "") return;
        continue;
      }
      if (found !== null) {
        this.last = text.slice(found.open, found.end + 1);
        from = found.end + 1;
      } else {
        from = at + 1;
      }
    }
  }

  caught(): string | null {
    return this.last;
  }
}

const INCOMPLETE = Symbol("incomplete");

/**
 * The object a key's colon introduces after `from` (`: {…}`): where it opens and closes, null
 * when what follows is no colon and object, INCOMPLETE when the text ends before it closes. Its
 * braces are counted as readUsage counts them: a usage object holds counts, no strings with braces.
 */
function objectAfter(text: string, from: number): { open: number; end: number } | null | typeof INCOMPLETE {
  let i = skipSpace(text, from);
  if (i === text.length) return INCOMPLETE;
  if (text[i] !== ":") return null;
  i = skipSpace(text, i + 1);
  if (i === text.length) return INCOMPLETE;
  if (text[i] !== "{") return null;
  const open = i;
  for (let depth = 0; i < text.length && i - open < USAGE_OBJECT_MAX_BYTES; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return { open, end: i };
  }
  return i - open < USAGE_OBJECT_MAX_BYTES ? INCOMPLETE : null;
}

function skipSpace(text: string, from: number): number {
  let i = from;
  while (i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\r" || text[i] === "\t")) i++;
  return i;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const USAGE_KEY = new TextEncoder().encode("usage");

/** Where a top-level scan is between a `usage` key and its value. */
type KeyState = "none" | "key" | "colon";

/**
 * The body's top-level `usage` object, its nesting tracked as the bytes pass: a Responses API
 * answer repeats the request's `tools`, `text.format` schema and `metadata`, where a client may
 * have written a `"usage": {…}` of its own (SGLang's after the real one), so only the key of the
 * body's own object counts. A string is passed by a native search for its closing quote; only the
 * bytes between strings are looked at one by one.
 */
export class TopLevelUsage implements UsageCatcher {
  /** Objects and arrays open: 1 inside the body's own object. */
  private depth = 0;
  private inString = false;
  /** The next byte is escaped (a string's backslash ended the last chunk). */
  private escaped = false;
  /** A key at depth 1 being read: its bytes so far match `usage` (length), or -1. */
  private keyMatch = -1;
  private keyState: KeyState = "none";
  /** The usage object's bytes so far, while it is open (null otherwise). */
  private parts: Uint8Array[] | null = null;
  private held = 0;
  private last: string | null = null;

  push(chunk: Uint8Array): void {
    let i = 0;
    let captureFrom = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.inString) {
        if (this.escaped) {
          this.escaped = false;
          this.keyMatch = -1;
          i++;
          continue;
        }
        const close = closingQuote(chunk, i);
        if (close < 0) {
          this.escaped = backslashesBefore(chunk, n, i) % 2 === 1;
          this.matchKey(chunk, i, n, false);
          i = n;
          break;
        }
        this.matchKey(chunk, i, close, true);
        this.inString = false;
        i = close + 1;
        continue;
      }
      const c = chunk[i] as number;
      if (c === QUOTE) {
        this.inString = true;
        // A key of the body's own object, unless it follows a key already (then it is a value).
        this.keyMatch = this.depth === 1 && this.keyState === "none" ? 0 : -1;
      } else if (c === 0x7b || c === 0x5b) {
        if (this.depth === 1 && this.keyState === "colon" && c === 0x7b) {
          this.parts = [];
          this.held = 0;
          captureFrom = i;
        }
        this.depth++;
        this.keyState = "none";
      } else if (c === 0x7d || c === 0x5d) {
        this.depth--;
        if (this.depth === 1 && this.parts) {
          this.keep(chunk.subarray(captureFrom, i + 1));
          if (this.parts) this.last = new TextDecoder().decode(join(this.parts));
          this.parts = null;
        }
      } else if (c === 0x3a) {
        this.keyState = this.keyState === "key" ? "colon" : "none";
      } else if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) {
        // A value's first byte (a number, true, null, a comma): not the usage object.
        this.keyState = "none";
      }
      i++;
    }
    if (this.parts) this.keep(chunk.subarray(captureFrom));
  }

  caught(): string | null {
    return this.last;
  }

  /** Compares a key's bytes [from, to) with `usage`; `closed`: the key ends at `to`. */
  private matchKey(chunk: Uint8Array, from: number, to: number, closed: boolean): void {
    if (this.keyMatch < 0) return;
    for (let i = from; i < to && this.keyMatch >= 0; i++) {
      this.keyMatch = this.keyMatch < USAGE_KEY.length && chunk[i] === USAGE_KEY[this.keyMatch] ? this.keyMatch + 1 : -1;
    }
    if (closed) {
      this.keyState = this.keyMatch === USAGE_KEY.length ? "key" : "none";
      this.keyMatch = -1;
    }
  }

  /** Holds the open object's bytes; one that outgrows a usage object is let go. */
  private keep(bytes: Uint8Array): void {
    if (!this.parts) return;
    this.held += bytes.length;
    if (this.held > USAGE_OBJECT_MAX_BYTES) this.parts = null;
    else this.parts.push(bytes.slice());
  }
}

/** The string's closing quote at or after `from` (the byte at `from` not escaped), or -1. */
function closingQuote(chunk: Uint8Array, from: number): number {
  for (let at = chunk.indexOf(QUOTE, from); at >= 0; at = chunk.indexOf(QUOTE, at + 1)) {
    if (backslashesBefore(chunk, at, from) % 2 === 0) return at;
  }
  return -1;
}

/** The backslashes just before `at`, back to `from` at most. */
function backslashesBefore(chunk: Uint8Array, at: number, from: number): number {
  let k = at;
  while (k > from && chunk[k - 1] === BACKSLASH) k--;
  return at - k;
}
