/**
 * A byte-level Server-Sent Events parser: finds line ends in the raw chunks with Buffer.indexOf
 * and decodes only the value of `data:` and `event:` lines, so a stream costs one native scan per
 * chunk and one small string per event. Lines end in LF or CRLF. A line cut across chunks is kept
 * as the chunks' tails and joined once its end arrives, so a long line costs one copy, not one
 * per chunk. UTF-8 is decoded per complete line, so a character split across chunks survives.
 */

export type SseHandler = (event: string, data: string) => void;

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;
const DATA = Buffer.from("data");
const EVENT = Buffer.from("event");

export class SseScanner {
  private readonly onEvent: SseHandler;
  private pending: Buffer[] = [];
  private event = "";
  private data: string | null = null;

  constructor(onEvent: SseHandler) {
    this.onEvent = onEvent;
  }

  push(chunk: Buffer): void {
    let pos = 0;
    if (this.pending.length > 0) {
      const lf = chunk.indexOf(LF);
      if (lf === -1) {
        this.pending.push(chunk);
        return;
      }
      this.pending.push(chunk.subarray(0, lf));
      const line = Buffer.concat(this.pending);
      this.pending = [];
      this.line(line, 0, line.length);
      pos = lf + 1;
    }
    for (;;) {
      const lf = chunk.indexOf(LF, pos);
      if (lf === -1) break;
      this.line(chunk, pos, lf);
      pos = lf + 1;
    }
    if (pos < chunk.length) this.pending.push(chunk.subarray(pos));
  }

  /**
   * The stream ended. The spec drops an event without its blank line; a benchmark client is
   * lenient instead, so a server that omits the last blank line is not counted as failing.
   */
  end(): void {
    if (this.pending.length > 0) {
      const line = Buffer.concat(this.pending);
      this.pending = [];
      this.line(line, 0, line.length);
    }
    this.line(Buffer.alloc(0), 0, 0);
  }

  private line(buf: Buffer, start: number, lineEnd: number): void {
    const end = lineEnd > start && buf[lineEnd - 1] === CR ? lineEnd - 1 : lineEnd;
    if (end === start) {
      if (this.data !== null) this.onEvent(this.event || "message", this.data);
      this.data = null;
      this.event = "";
      return;
    }
    if (buf[start] === COLON) return; // a comment, e.g. a keep-alive ping
    const colon = buf.indexOf(COLON, start);
    const nameEnd = colon === -1 || colon > end ? end : colon;
    let valueStart = nameEnd === end ? end : nameEnd + 1;
    if (valueStart < end && buf[valueStart] === SPACE) valueStart++;
    if (isField(buf, start, nameEnd, DATA)) {
      const value = buf.toString("utf8", valueStart, end);
      this.data = this.data === null ? value : `${this.data}\n${value}`;
    } else if (isField(buf, start, nameEnd, EVENT)) {
      this.event = buf.toString("utf8", valueStart, end);
    }
    // id and retry mean nothing to a one-shot completion stream.
  }
}

function isField(buf: Buffer, start: number, end: number, name: Buffer): boolean {
  return end - start === name.length && buf.compare(name, 0, name.length, start, end) === 0;
}
