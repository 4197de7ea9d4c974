import net from "node:net";

/**
 * A client on a raw socket, so a test controls exactly how it leaves: `close` ends the connection
 * the way curl -m or a closed browser tab does (FIN), `reset` aborts it (RST).
 */
export interface RawExchange {
  /** Everything received so far, as text. */
  received(): string;
  /** Resolves once the received text matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Stops reading: what comes fills the socket's buffers, then holds the sender back. */
  pause(): void;
  /** Reads again after pause(). */
  resume(): void;
  close(): void;
  reset(): void;
  /** Resolves when the server side has closed the connection. */
  ended: Promise<void>;
}

export async function rawPost(baseUrl: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<RawExchange> {
  const u = new URL(baseUrl);
  const payload = Buffer.from(JSON.stringify(body));
  const socket = net.connect(Number(u.port), u.hostname);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const lines = [`POST ${path} HTTP/1.1`, `host: ${u.host}`, "content-type: application/json", `content-length: ${payload.length}`];
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  socket.write(Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"), payload]));
  let text = "";
  const waiters: (() => void)[] = [];
  socket.on("data", (d: Buffer) => {
    text += d.toString("utf8");
    for (const w of waiters.splice(0)) w();
  });
  socket.on("error", () => {});
  const ended = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return {
    received: () => text,
    waitFor: (pattern, timeoutMs = 10_000) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${pattern} within ${timeoutMs} ms; received: ${text.slice(0, 500)}`)), timeoutMs);
        const check = (): void => {
          if (pattern.test(text)) {
            clearTimeout(timer);
            resolve();
          } else waiters.push(check);
        };
        check();
      }),
    pause: () => void socket.pause(),
    resume: () => void socket.resume(),
    close: () => socket.destroy(),
    reset: () => socket.resetAndDestroy(),
    ended,
  };
}
