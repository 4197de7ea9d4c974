import type { IncomingHttpHeaders } from "node:http";
import { WebSocket, type RawData } from "ws";

/** A message as the client received it. */
export interface Received {
  data: Buffer;
  binary: boolean;
}

/** An open WebSocket, with what it received queued for the test to take in order. */
export interface OpenSocket {
  ws: WebSocket;
  /** The headers of the gateway's 101. */
  headers: IncomingHttpHeaders;
  /** The next message not yet taken; rejects when none comes within `timeoutMs`. */
  next(timeoutMs?: number): Promise<Received>;
  /** The next text message parsed as JSON whose `type` is `type`; skips the others. */
  event(type: string, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** Resolves with the close the client saw: the code and reason of the frame it got (1005: none; 1006: the connection broke). */
  closed: Promise<{ code: number; reason: string }>;
}

export type Handshake = { kind: "open"; socket: OpenSocket } | { kind: "refused"; status: number; headers: IncomingHttpHeaders; body: { error: Record<string, unknown> } };

/**
 * Opens a WebSocket as a server-side client does (the `ws` package: it may set headers, such as
 * Authorization), and reports a refused handshake's status and body instead of failing.
 */
export function connect(url: string, o: { protocols?: string[]; headers?: Record<string, string> } = {}): Promise<Handshake> {
  return new Promise<Handshake>((resolve, reject) => {
    const ws = new WebSocket(url, o.protocols ?? [], { headers: o.headers });
    const queue: Received[] = [];
    const waiters: (() => void)[] = [];
    ws.on("message", (data: RawData, binary: boolean) => {
      queue.push({ data: Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer), binary });
      for (const w of waiters.splice(0)) w();
    });
    const closed = new Promise<{ code: number; reason: string }>((r) => ws.once("close", (code, reason) => r({ code, reason: reason.toString() })));
    const next = (timeoutMs = 5000): Promise<Received> =>
      new Promise<Received>((res, rej) => {
        const timer = setTimeout(() => rej(new Error(`no message within ${timeoutMs} ms`)), timeoutMs);
        const take = (): void => {
          const m = queue.shift();
          if (!m) return void waiters.push(take);
          clearTimeout(timer);
          res(m);
        };
        take();
      });
    const event = async (type: string, timeoutMs = 5000): Promise<Record<string, unknown>> => {
      for (;;) {
        const m = await next(timeoutMs);
        if (m.binary) continue;
        const e = JSON.parse(m.data.toString("utf8")) as Record<string, unknown>;
        if (e.type === type) return e;
      }
    };
    let headers: IncomingHttpHeaders = {};
    ws.once("upgrade", (res) => (headers = res.headers));
    ws.once("open", () => resolve({ kind: "open", socket: { ws, headers, next, event, closed } }));
    ws.once("unexpected-response", (req, res) => {
      const parts: Buffer[] = [];
      res.on("data", (c: Buffer) => parts.push(c));
      res.on("end", () => {
        const body = JSON.parse(Buffer.concat(parts).toString("utf8")) as { error: Record<string, unknown> };
        resolve({ kind: "refused", status: res.statusCode ?? 0, headers: res.headers, body });
        req.destroy();
      });
    });
    ws.once("error", reject);
  });
}

/** The socket of a handshake that must have opened. */
export function opened(h: Handshake): OpenSocket {
  if (h.kind !== "open") throw new Error(`the handshake was refused: ${h.status} ${JSON.stringify(h.body)}`);
  return h.socket;
}
