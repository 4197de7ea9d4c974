/**
 * Closed-loop streaming load over raw keep-alive sockets: `connections` clients, each sending its
 * next request as soon as the previous stream ended, for `durationMs`. Per request it notes the
 * time to the first content byte (the first SSE event carrying non-empty `content`, not the
 * role event before it) and to the end of the stream. autocannon sees only whole responses, so
 * it cannot time the first token.
 */
import { connect, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { ResponseParser } from "./http1-response.ts";
import type { LoadResult, RequestSpec } from "./load-types.ts";

/** A token event: `"content":"` then anything but the closing quote (the role event's is ""). */
const CONTENT = /"content":\s*"[^"]/;
/** How much of the previous body piece is kept so a marker split across pieces is still found. */
const OVERLAP = 24;
const DONE_MARK = "data: [DONE]";
const MAX_ERROR_SAMPLES = 5;
const REQUEST_TIMEOUT_MS = 30_000;
const ERROR_BACKOFF_MS = 20;

export interface StreamLoadOptions extends RequestSpec {
  connections: number;
  durationMs: number;
  /** Stop earlier after this many requests in all (bounds a run against a fast target). */
  maxRequests: number;
}

function encodeRequests(o: RequestSpec): Buffer[] {
  const u = new URL(o.url);
  return o.bodies.map((body) => {
    const payload = Buffer.from(body);
    const lines = [`POST ${u.pathname} HTTP/1.1`, `host: ${u.host}`, "content-type: application/json", "accept: text/event-stream", `content-length: ${payload.length}`];
    for (const [k, v] of Object.entries(o.headers)) lines.push(`${k}: ${v}`);
    return Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"), payload]);
  });
}

export async function runStreamLoad(o: StreamLoadOptions): Promise<LoadResult> {
  const requests = encodeRequests(o);
  const u = new URL(o.url);
  const result: LoadResult = { completed: 0, errors: 0, elapsedMs: 0, latenciesMs: [], ttftMs: [], overheadMs: [], errorSamples: [] };
  const startedAt = performance.now();
  const stopAt = startedAt + o.durationMs;
  let issued = 0;
  let lastEnd = startedAt;

  const fail = (why: string): void => {
    result.errors++;
    if (result.errorSamples.length < MAX_ERROR_SAMPLES) result.errorSamples.push(why);
  };

  // One connection's loop: a request, its whole response, the next request.
  const client = async (): Promise<void> => {
    let socket: Socket | null = null;
    while (performance.now() < stopAt && issued < o.maxRequests) {
      const request = requests[issued++ % requests.length] as Buffer;
      try {
        socket ??= await open(u);
        const outcome = await exchange(socket, request);
        lastEnd = performance.now();
        if (outcome.overheadMs !== null) result.overheadMs.push(outcome.overheadMs);
        if (outcome.error) fail(outcome.error);
        else {
          result.completed++;
          result.latenciesMs.push(outcome.totalMs);
          if (outcome.ttftMs !== null) result.ttftMs.push(outcome.ttftMs);
        }
        if (!outcome.keepAlive) {
          socket.destroy();
          socket = null;
        }
      } catch (e) {
        lastEnd = performance.now();
        fail((e as Error).message);
        socket?.destroy();
        socket = null;
        // A failing target must not be hammered with reconnects (file descriptors, logs).
        await sleep(ERROR_BACKOFF_MS);
      }
    }
    socket?.destroy();
  };

  await Promise.all(Array.from({ length: o.connections }, client));
  result.elapsedMs = lastEnd - startedAt;
  return result;
}

function open(u: URL): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: u.hostname, port: Number(u.port), noDelay: true });
    s.once("connect", () => {
      s.off("error", reject);
      resolve(s);
    });
    s.once("error", reject);
  });
}

interface Outcome {
  totalMs: number;
  ttftMs: number | null;
  overheadMs: number | null;
  keepAlive: boolean;
  error: string | null;
}

/** Sends one request on an open socket and reads its response to the end. */
function exchange(socket: Socket, request: Buffer): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    let status = 0;
    let ttftAt: number | null = null;
    let overheadMs: number | null = null;
    let keepAlive = true;
    let tail = "";
    let sawDone = false;
    let errorBody = "";
    const t0 = performance.now();

    const parser = new ResponseParser({
      onHead(s, headers) {
        status = s;
        const overhead = headers.get("x-kvgate-overhead-ms");
        if (overhead !== undefined) overheadMs = Number(overhead);
        keepAlive = (headers.get("connection") ?? "").toLowerCase() !== "close";
      },
      onBody(data) {
        const text = tail + data.toString("latin1");
        if (status !== 200 && errorBody.length < 300) errorBody += data.toString("utf8");
        if (ttftAt === null && CONTENT.test(text)) ttftAt = performance.now();
        if (!sawDone && text.includes(DONE_MARK)) sawDone = true;
        tail = text.slice(-OVERLAP);
      },
      onEnd() {
        const end = performance.now();
        cleanup();
        let error: string | null = null;
        if (status !== 200) error = `HTTP ${status}: ${errorBody.slice(0, 200)}`;
        else if (!sawDone) error = "stream ended without [DONE]";
        resolve({ totalMs: end - t0, ttftMs: ttftAt === null ? null : ttftAt - t0, overheadMs, keepAlive, error });
      },
    });

    const onData = (chunk: Buffer): void => {
      try {
        parser.push(chunk);
      } catch (e) {
        cleanup();
        reject(e);
      }
    };
    const onClose = (): void => {
      if (parser.close()) return;
      cleanup();
      reject(new Error("connection closed mid-response"));
    };
    const onError = (e: Error): void => {
      cleanup();
      reject(e);
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`no complete response within ${REQUEST_TIMEOUT_MS} ms`));
    }, REQUEST_TIMEOUT_MS);
    function cleanup(): void {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("close", onClose);
      socket.off("error", onError);
    }
    socket.on("data", onData);
    socket.on("close", onClose);
    socket.on("error", onError);
    socket.write(request);
  });
}
