import { holdsAt } from "./byte-match.ts";
import { concat, join } from "./bytes.ts";

const QUOTE = 0x22;
const COLON = 0x3a;

/** JSON's whitespace: space, tab, line feed, carriage return; nothing else. */
function isJsonSpace(b: number): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
}

/** Where the rewriter is in `"key" : "value"`; it carries over from one chunk to the next. */
const Phase = {
  /** Looking for the opening quote of a key. */
  Idle: 0,
  /** Inside a candidate key, `matched` bytes of it seen. */
  Key: 1,
  /** After the key, before the colon. */
  BeforeColon: 2,
  /** After the colon, before the value. */
  AfterColon: 3,
} as const;
type Phase = (typeof Phase)[keyof typeof Phase];

const encoder = new TextEncoder();

/**
 * Rewrites one string value of one key on the bytes of a stream of JSON (`"model": "<upstream>"`
 * to the name the client asked for), with any JSON whitespace around the colon. No decoding or
 * parsing: a chunk without a match is passed on as it came. The key and the whitespace go out as
 * they arrive; only the beginning of a value that may still turn out to be the one replaced is
 * held back, never more than the value's length, so no whole event is delayed and an upstream
 * that pads with whitespace cannot make the hold grow.
 *
 * Matches what a one-shot regex `"key"\s*:\s*"from"` (JSON whitespace) over the whole stream
 * would: leftmost first, and a failed candidate is retried from the next place a key could start.
 */
export class JsonFieldRewriter {
  private readonly key: Uint8Array;
  private readonly from: Uint8Array;
  private readonly to: Uint8Array;
  private phase: Phase = Phase.Idle;
  private matched = 0;
  /** Whether whitespace came between the key and where the rewriter is. */
  private spaced = false;
  /** The beginning of a value, from its opening quote, that the next chunk decides. */
  private held: Uint8Array | null = null;

  constructor(key: string, from: string, to: string) {
    this.key = encoder.encode(JSON.stringify(key));
    this.from = encoder.encode(JSON.stringify(from));
    this.to = encoder.encode(JSON.stringify(to));
  }

  transform(chunk: Uint8Array): Uint8Array {
    const data = this.held ? concat(this.held, chunk) : chunk;
    this.held = null;
    const { key, from } = this;
    const n = data.length;
    let pieces: Uint8Array[] | null = null;
    let emitted = 0;
    let end = n;
    let i = 0;
    while (i < n) {
      if (this.phase === Phase.Idle) {
        const q = data.indexOf(QUOTE, i);
        if (q < 0) break;
        this.phase = Phase.Key;
        this.matched = 1;
        i = q + 1;
      } else if (this.phase === Phase.Key) {
        // A mismatching byte is looked at again as Idle: it may open the next key.
        if (data[i] !== key[this.matched]) this.phase = Phase.Idle;
        else {
          i++;
          if (++this.matched === key.length) {
            this.phase = Phase.BeforeColon;
            this.spaced = false;
          }
        }
      } else {
        const b = data[i] as number;
        if (isJsonSpace(b)) {
          this.spaced = true;
          i++;
        } else if (this.phase === Phase.BeforeColon) {
          if (b === COLON) {
            this.phase = Phase.AfterColon;
            i++;
          } else if (this.spaced) this.phase = Phase.Idle;
          else {
            // Right after the key: its closing quote may open the next one (`"model"model":`).
            this.phase = Phase.Key;
            this.matched = 1;
          }
        } else if (b !== QUOTE) this.phase = Phase.Idle;
        else {
          const seen = Math.min(n - i, from.length);
          if (!holdsAt(data, i, from, seen)) {
            // Not the value: its opening quote may still open a key.
            this.phase = Phase.Idle;
          } else if (seen < from.length) {
            // The chunk ends inside what may be the value: hold it, decide with the next chunk.
            this.held = data.slice(i);
            end = i;
            break;
          } else {
            pieces ??= [];
            pieces.push(data.subarray(emitted, i), this.to);
            emitted = i += from.length;
            this.phase = Phase.Idle;
          }
        }
      }
    }
    if (!pieces) return end === n ? data : data.subarray(0, end);
    pieces.push(data.subarray(emitted, end));
    return join(pieces);
  }

  flush(): Uint8Array | null {
    const rest = this.held;
    this.held = null;
    this.phase = Phase.Idle;
    return rest;
  }
}
