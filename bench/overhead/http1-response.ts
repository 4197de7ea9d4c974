/**
 * An incremental HTTP/1.1 response parser for the streaming client: status, headers, and a body
 * framed by Content-Length or chunked encoding, handed on as it arrives so the client can time
 * the first content byte. Node's http client costs more per response than the gateways under
 * test; this does only what a keep-alive benchmark client needs.
 */

export interface ResponseEvents {
  onHead(status: number, headers: Map<string, string>): void;
  onBody(data: Buffer): void;
  onEnd(): void;
}

type State = "head" | "length" | "chunk-size" | "chunk-data" | "chunk-crlf" | "trailers" | "until-close" | "done";

const CRLF = Buffer.from("\r\n");
const HEAD_END = Buffer.from("\r\n\r\n");
const EMPTY = Buffer.alloc(0);

export class ResponseParser {
  private state: State = "head";
  private pending: Buffer = EMPTY;
  private remaining = 0;
  private readonly events: ResponseEvents;

  constructor(events: ResponseEvents) {
    this.events = events;
  }

  get done(): boolean {
    return this.state === "done";
  }

  /** True when the body runs until the server closes the connection (no framing). */
  get readsUntilClose(): boolean {
    return this.state === "until-close";
  }

  /** Feeds bytes; returns bytes left over past the end of this response (none in practice). */
  push(data: Buffer): Buffer {
    const buf = this.pending.length > 0 ? Buffer.concat([this.pending, data]) : data;
    this.pending = EMPTY;
    let at = 0;
    while (at < buf.length && this.state !== "done") {
      const used = this.step(buf, at);
      if (used < 0) break; // needs more bytes
      at = used;
    }
    if (this.state === "done") return buf.subarray(at);
    if (at < buf.length) this.pending = Buffer.from(buf.subarray(at));
    return EMPTY;
  }

  /** The server closed the connection: ends a body that runs until close. */
  close(): boolean {
    if (this.state !== "until-close") return false;
    this.state = "done";
    this.events.onEnd();
    return true;
  }

  /** Consumes what it can from `at`; returns the new offset, or -1 when it needs more bytes. */
  private step(buf: Buffer, at: number): number {
    switch (this.state) {
      case "head": {
        const end = buf.indexOf(HEAD_END, at);
        if (end < 0) return -1;
        this.head(buf.toString("latin1", at, end));
        return end + 4;
      }
      case "length": {
        const n = Math.min(this.remaining, buf.length - at);
        this.events.onBody(buf.subarray(at, at + n));
        this.remaining -= n;
        if (this.remaining === 0) this.finish();
        return at + n;
      }
      case "until-close": {
        this.events.onBody(buf.subarray(at));
        return buf.length;
      }
      case "chunk-size": {
        const end = buf.indexOf(CRLF, at);
        if (end < 0) return -1;
        const size = Number.parseInt(buf.toString("latin1", at, end).split(";")[0] ?? "", 16);
        if (!Number.isFinite(size)) throw new Error("bad chunk size");
        if (size === 0) this.state = "trailers";
        else {
          this.remaining = size;
          this.state = "chunk-data";
        }
        return end + 2;
      }
      case "chunk-data": {
        const n = Math.min(this.remaining, buf.length - at);
        this.events.onBody(buf.subarray(at, at + n));
        this.remaining -= n;
        if (this.remaining === 0) this.state = "chunk-crlf";
        return at + n;
      }
      case "chunk-crlf": {
        if (buf.length - at < 2) return -1;
        this.state = "chunk-size";
        return at + 2;
      }
      case "trailers": {
        const end = buf.indexOf(CRLF, at);
        if (end < 0) return -1;
        // An empty line ends the trailers (there are none in practice).
        if (end === at) this.finish();
        return end + 2;
      }
      case "done":
        return buf.length;
    }
  }

  private head(text: string): void {
    const lines = text.split("\r\n");
    const status = Number((lines[0] ?? "").split(" ")[1]);
    const headers = new Map<string, string>();
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i] as string;
      const colon = line.indexOf(":");
      if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    this.events.onHead(status, headers);
    const length = headers.get("content-length");
    if ((headers.get("transfer-encoding") ?? "").toLowerCase().includes("chunked")) this.state = "chunk-size";
    else if (length !== undefined) {
      this.remaining = Number(length);
      if (this.remaining === 0) this.finish();
      else this.state = "length";
    } else if (status === 204 || status === 304) this.finish();
    else this.state = "until-close";
  }

  private finish(): void {
    this.state = "done";
    this.events.onEnd();
  }
}
