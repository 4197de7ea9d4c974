import { concat } from "./bytes.ts";

/**
 * Byte-level search and replace over a stream of chunks, for rewriting `"model":"<upstream>"`
 * to the name the client asked for. No decoding or JSON parsing: a chunk without a match is
 * passed on as it came. Only a chunk's tail that could begin the pattern is held back until the
 * next chunk, so a pattern straddling two chunks is still found and no whole event is delayed.
 */
export class ByteReplacer {
  private readonly pattern: Uint8Array;
  private readonly replacement: Uint8Array;
  private carry: Uint8Array | null = null;

  constructor(pattern: Uint8Array, replacement: Uint8Array) {
    if (pattern.length === 0) throw new Error("empty pattern");
    this.pattern = pattern;
    this.replacement = replacement;
  }

  transform(chunk: Uint8Array): Uint8Array {
    const data = this.carry ? concat(this.carry, chunk) : chunk;
    this.carry = null;
    const p = this.pattern;
    const first = p[0] as number;
    let pieces: Uint8Array[] | null = null;
    let emitted = 0;
    let i = data.indexOf(first);
    while (i >= 0 && i + p.length <= data.length) {
      if (matchesAt(data, i, p)) {
        pieces ??= [];
        pieces.push(data.subarray(emitted, i), this.replacement);
        emitted = i + p.length;
        i = data.indexOf(first, emitted);
      } else {
        i = data.indexOf(first, i + 1);
      }
    }
    // A tail shorter than the pattern may be its beginning: hold it for the next chunk.
    const hold = i >= 0 ? heldTail(data, Math.max(i, emitted), p) : 0;
    const end = data.length - hold;
    if (hold > 0) this.carry = data.slice(end);
    if (!pieces) return end === data.length ? data : data.subarray(0, end);
    pieces.push(data.subarray(emitted, end));
    return concat(...pieces);
  }

  flush(): Uint8Array | null {
    const rest = this.carry;
    this.carry = null;
    return rest;
  }
}

function matchesAt(data: Uint8Array, at: number, p: Uint8Array): boolean {
  for (let k = 1; k < p.length; k++) if (data[at + k] !== p[k]) return false;
  return true;
}

/** Length of the shortest suffix starting at or after `from` that is a proper prefix of p. */
function heldTail(data: Uint8Array, from: number, p: Uint8Array): number {
  for (let s = from; s < data.length; s++) {
    if (data[s] !== p[0]) continue;
    let k = 1;
    while (s + k < data.length && data[s + k] === p[k]) k++;
    if (s + k === data.length) return data.length - s;
  }
  return 0;
}
