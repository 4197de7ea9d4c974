import type { ServerResponse } from "node:http";

const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };

/**
 * A streamed response. Each event is one res.write, which Node sends at once (the server socket
 * has Nagle off), so a client sees every token when the engine produces it. Backpressure is not
 * awaited: a real engine keeps generating for a slow reader too, and an event is small.
 */
export class SseWriter {
  private readonly res: ServerResponse;

  constructor(res: ServerResponse) {
    this.res = res;
  }

  /** Status and headers go out before the first token, as uvicorn sends them before vLLM's first chunk. */
  open(headers: Readonly<Record<string, string>>): void {
    this.res.writeHead(200, { ...headers, ...SSE_HEADERS });
    this.res.flushHeaders();
  }

  send(event: string): void {
    this.res.write(event);
  }

  /** The stream's last events, and its end. */
  end(last: string): void {
    this.res.end(last);
  }

  /** Destroys the socket under the response: the client sees the stream break, not end. */
  abort(): void {
    this.res.destroy();
  }
}
