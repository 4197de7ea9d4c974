/**
 * Bounds on a request body's structure, checked on its text in one pass before JSON.parse.
 *
 * Within the byte limit, what a body costs to parse, validate and serialise again for the
 * upstream is set by how many things it holds, not by its size: 4 MiB of one string parses in a
 * few milliseconds, 4 MiB of `{}` is a million objects and takes hundreds (then as long again for
 * every pass over them). Counting before parsing refuses such a body for the price of reading it.
 */
export interface ShapeBounds {
  /**
   * Levels of objects and arrays. JSON.parse takes any depth, but serialising the body for the
   * upstream may recurse and overflow the stack: a few kilobytes of brackets would then fail the
   * request after routing, as if the backend had. Real requests nest a few dozen levels at most.
   */
  maxDepth: number;
  /** Objects, arrays and keys in the whole body: what parsing allocates and every later pass walks. */
  maxNodes: number;
  /** Keys of any one object: an object with many keys takes V8's slow paths to build, copy and serialise. */
  maxObjectKeys: number;
}

/**
 * The gateway's bounds: not configurable, like the depth. 131,072 nodes leave room for a request
 * at every other limit (4,096 messages with tool calls and content parts, 1,024 tool schemas).
 */
export const BODY_SHAPE: ShapeBounds = { maxDepth: 128, maxNodes: 131_072, maxObjectKeys: 1_024 };

export type ShapeRule = "depth" | "nodes" | "object-keys";

export interface ShapeExcess {
  rule: ShapeRule;
  /** The top-level field whose value passes the bound; null when it is the body's own object. */
  field: string | null;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const MINUS = 0x2d;
const DIGITS = "0123456789";
/** 1: a character of the structure; 2: one that starts a number. */
const STRUCTURAL = new Uint8Array(CLOSE_OBJECT + 1);
for (const c of [QUOTE, COLON, OPEN_OBJECT, CLOSE_OBJECT, OPEN_ARRAY, CLOSE_ARRAY]) STRUCTURAL[c] = 1;
const NUMBER_START = 2;
for (const c of [MINUS, ...[...DIGITS].map((d) => d.charCodeAt(0))]) STRUCTURAL[c] = NUMBER_START;
/** Characters a JSON number may hold. */
const IN_NUMBER = new Uint8Array(0x80);
for (const ch of `${DIGITS}+-.eE`) IN_NUMBER[ch.charCodeAt(0)] = 1;
/**
 * An integer this long may be one a double does not hold exactly: its value is checked, as is any
 * number with an exponent. A fraction is read as the nearest double by every reader alike; one
 * longer than a double's largest value is written (309 digits) may be past its range.
 */
const SHORT_INTEGER = 15;
const SHORT_FRACTION = 309;

/** What one pass over a body's text found: the first bound it passes, and whether a number in it is inexact. */
export interface BodyScan {
  excess: ShapeExcess | null;
  /** A number JSON.parse would change (see `isInexactNumber`): the body must be parsed keeping its text. */
  inexactNumbers: boolean;
  /**
   * The top-level fields whose value (as JSON.parse keeps it: a key's last) holds such a number,
   * each with where its value's text lies: only these need parsing again keeping it.
   */
  inexactFields: InexactField[];
}

/** A top-level field holding an inexact number, and its value's text: `text.slice(start, end)`. */
export interface InexactField {
  field: string;
  start: number;
  end: number;
}

/**
 * Whether a JSON number's text names a value JSON.parse would change, so that the body serialised
 * again for the upstream would say something else: an integer past 2^53 (a seed of 2^63 − 1, which
 * Python's json and the engines read exactly) loses digits, and one past a double's range (1e400)
 * becomes null. A decimal fraction is read as the nearest double by every JSON reader alike.
 */
export function isInexactNumber(text: string): boolean {
  const v = Number(text);
  if (!Number.isFinite(v)) return true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x2e || c === 0x65 || c === 0x45) return false;
  }
  return !Number.isSafeInteger(v);
}

/**
 * The first bound the text passes, reading it as JSON: outside strings, `{` and `[` open a
 * container, `}` and `]` close one, and every `:` is a key of the innermost. On text that is not
 * JSON this still terminates and counts the same way; JSON.parse then judges what passes.
 */
export function shapeExcess(text: string, bounds: ShapeBounds = BODY_SHAPE): ShapeExcess | null {
  return scanBody(text, bounds).excess;
}

/** shapeExcess, and in the same pass whether a number of the body is inexact. */
export function scanBody(text: string, bounds: ShapeBounds = BODY_SHAPE): BodyScan {
  const keysAt = new Int32Array(bounds.maxDepth + 1);
  let depth = 0;
  let nodes = 0;
  // The last string read in the body's own object (taken once a colon has read it as its key), and
  // the one that named the current field.
  let lastStart = -1;
  let lastEnd = -1;
  let lastTaken = false;
  let field: [number, number] | null = null;
  let inexactNumbers = false;
  // Where the current top-level field's value starts, and whether it holds an inexact number.
  let valueStart = -1;
  let inexactHere = false;
  // Whether the first top-level value has ended: fields are tracked in it only (JSON.parse refuses
  // the text if another follows), so that text of many top-level objects costs no more to read.
  let firstValueEnded = false;
  // By name: a key given again replaces its value (JSON.parse keeps the last), and so its entry.
  const inexactFields = new Map<string, InexactField>();
  // The top-level field that just ended (its value's text up to `end`), kept when it holds one.
  const fieldEnds = (end: number): void => {
    if (firstValueEnded || valueStart < 0 || (!inexactHere && inexactFields.size === 0)) return;
    const name = field && decodeKey(text, field);
    if (name === null) return;
    inexactFields.delete(name);
    if (inexactHere) inexactFields.set(name, { field: name, start: valueStart, end });
  };
  const found = (excess: ShapeExcess | null): BodyScan => ({ excess, inexactNumbers, inexactFields: [...inexactFields.values()] });
  const excess = (rule: ShapeRule, at: number): BodyScan => found({ rule, field: at >= 2 && field ? decodeKey(text, field) : null });
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    // Nothing past "}" is structural; most of a body's characters are skipped here.
    if (c > CLOSE_OBJECT || STRUCTURAL[c] === 0) continue;
    if (STRUCTURAL[c] === NUMBER_START) {
      // A number outside any string (one inside a string is skipped with it).
      let end = i + 1;
      let exponent = false;
      let fraction = false;
      for (; end < n; end++) {
        const d = text.charCodeAt(end);
        if (d >= 0x80 || IN_NUMBER[d] === 0) break;
        if (d === 0x65 || d === 0x45) exponent = true;
        else if (d === 0x2e) fraction = true;
      }
      const long = end - i > (fraction ? SHORT_FRACTION : SHORT_INTEGER);
      if (!inexactHere && (exponent || long) && isInexactNumber(text.slice(i, end))) {
        inexactNumbers = true;
        // Past the first in a field, its others change nothing: the field is parsed again whole.
        inexactHere = depth >= 1;
      }
      i = end - 1;
    } else if (c === QUOTE) {
      const end = closingQuote(text, i + 1);
      if (depth === 1) {
        lastStart = i;
        lastEnd = end;
        lastTaken = false;
      }
      i = end;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      depth++;
      if (depth > bounds.maxDepth) return excess("depth", depth);
      if (++nodes > bounds.maxNodes) return excess("nodes", depth);
      keysAt[depth] = 0;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (depth === 1 && c === CLOSE_OBJECT) fieldEnds(i);
      if (depth > 0) depth--;
      if (depth === 0) firstValueEnded = true;
    } else if (c === COLON) {
      if (depth === 1) {
        // The field before ends at the comma before this one's key, past only space: each run of
        // space is walked once, by the colon that takes the key after it. With no comma there
        // the text is not JSON, and nothing is recorded.
        if (lastStart >= 0 && !lastTaken) {
          const comma = lastNotSpace(text, lastStart);
          if (comma >= 0 && text.charCodeAt(comma) === COMMA) fieldEnds(comma);
        }
        field = [lastStart, lastEnd];
        lastTaken = true;
        valueStart = i + 1;
        inexactHere = false;
      }
      if (++nodes > bounds.maxNodes) return excess("nodes", depth);
      if (depth === 0) continue;
      const keys = (keysAt[depth] as number) + 1;
      keysAt[depth] = keys;
      if (keys > bounds.maxObjectKeys) return excess("object-keys", depth);
    }
  }
  return found(null);
}

/** Index of the last character before `at` that is not JSON's space (space, tab, line feed, return), or -1. */
function lastNotSpace(text: string, at: number): number {
  let i = at - 1;
  for (; i >= 0; i--) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
  }
  return i;
}

/**
 * Characters of a string read one at a time before its end is looked for with indexOf: most
 * strings (keys, short values) end sooner, and a call to indexOf costs more than reading them.
 */
const STRETCH = 32;

/** Index of the quote that closes a string whose text starts at `from`, or the text's length. */
function closingQuote(text: string, from: number): number {
  const n = text.length;
  let i = from;
  for (;;) {
    const stretchEnd = Math.min(n, i + STRETCH);
    for (; i < stretchEnd; i++) {
      const c = text.charCodeAt(i);
      if (c === QUOTE) return i;
      if (c === BACKSLASH) i++;
    }
    if (i >= n) return n;
    // A long string: jump to its next quote; one after an odd run of backslashes is escaped.
    const q = text.indexOf('"', i);
    if (q < 0) return n;
    let k = q - 1;
    while (k >= i && text.charCodeAt(k) === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q;
    i = q + 1;
  }
}

function decodeKey(text: string, [start, end]: [number, number]): string | null {
  if (start < 0) return null;
  try {
    const key: unknown = JSON.parse(text.slice(start, end + 1));
    return typeof key === "string" ? key : null;
  } catch {
    return null;
  }
}
