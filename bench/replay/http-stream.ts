import http, { type IncomingHttpHeaders } from "node:http";
import https from "node:https";

/**
 * One POST whose response is read as it streams. node:http rather than the global fetch: fetch's
 * pool (undici) is unbounded per origin too, but it hands the body over through a WHATWG stream,
 * one promise per chunk, and with hundreds of concurrent streams on two cores the client would be
 * measured instead of the server. Here each chunk is a Buffer handed over in a 'data' event.
 */

export interface StreamHandlers {
  response(status: number, headers: IncomingHttpHeaders): void;
  /** A body chunk, with performance.now() at its arrival. */
  chunk(data: Buffer, at: number): void;
  /** The timeout ended the request: the failure it resolves with is the timeout's. */
  timedOut?(): void;
}

/** Many streams at once on one origin: no socket limit, and idle sockets are kept for the next turn. */
export function keepAliveAgent(url: URL): http.Agent {
  const options = { keepAlive: true, maxSockets: Infinity, maxFreeSockets: 65_536, scheduling: "lifo" as const };
  return url.protocol === "https:" ? new https.Agent(options) : new http.Agent(options);
}

/** Resolves with null when the response ended cleanly, or with why it did not; never rejects. */
export function streamPost(
  url: URL,
  agent: http.Agent,
  headers: Readonly<Record<string, string>>,
  body: Buffer,
  timeoutMs: number,
  handlers: StreamHandlers,
): Promise<string | null> {
  return new Promise((resolve) => {
    let settled = false;
    const finish = (error: string | null): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(error);
    };
    const send = url.protocol === "https:" ? https.request : http.request;
    const req = send(url, { method: "POST", agent, headers: { ...headers, "content-length": String(body.length) } }, (res) => {
      handlers.response(res.statusCode ?? 0, res.headers);
      res.on("data", (chunk: Buffer) => handlers.chunk(chunk, performance.now()));
      res.on("end", () => finish(null));
      res.on("error", (error) => finish(`response broke: ${error.message}`));
      res.on("close", () => finish(res.complete ? null : "connection closed before the response ended"));
    });
    req.on("error", (error) => finish(`request failed: ${error.message}`));
    const timer = setTimeout(() => {
      handlers.timedOut?.();
      finish(`timed out after ${timeoutMs} ms`);
      req.destroy();
    }, timeoutMs);
    req.end(body);
  });
}
