import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { readBody, sendError, sendJson } from "./http-replies.ts";
import { handleInference, type Endpoint } from "./inference-handler.ts";
import { renderMetrics } from "./metrics.ts";
import { createWorkerContext, type WorkerConfig, type WorkerContext } from "./worker-context.ts";

export const HOST = "127.0.0.1";
const MAX_BODY_BYTES = 64 * 1024 * 1024;
const HEALTH_BODY = '{"status":"ok"}';

export interface SimWorker {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** One simulated GPU worker: an OpenAI-compatible HTTP server on 127.0.0.1. */
export async function startWorker(config: WorkerConfig): Promise<SimWorker> {
  const ctx = createWorkerContext(config);
  const modelsBody = JSON.stringify({
    object: "list",
    data: [
      {
        id: config.servedModelName,
        object: "model",
        created: Math.floor(Date.now() / 1000),
        owned_by: "kvgate-sim",
        root: config.servedModelName,
        parent: null,
        max_model_len: config.profile.maxModelLen,
      },
    ],
  });

  const server = createServer((req, res) => route(ctx, req, res, modelsBody));
  let closed: Promise<void> | undefined;
  const shut = (): Promise<void> =>
    (closed ??= new Promise<void>((resolve) => {
      ctx.dead = true;
      ctx.scheduler.stop();
      for (const timer of ctx.timers) clearTimeout(timer);
      ctx.timers.clear();
      // The callback runs once every connection is gone; closeAllConnections makes that now,
      // stalled streams and idle keep-alive sockets included.
      server.close(() => resolve());
      server.closeAllConnections();
    }));
  ctx.die = () => void shut();

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port: config.port, host: HOST }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = listeningPort(server.address());
  return { url: `http://${HOST}:${port}`, port, close: shut };
}

function route(ctx: WorkerContext, req: IncomingMessage, res: ServerResponse, modelsBody: string): void {
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  const path = q === -1 ? url : url.slice(0, q);
  const endpoint: Endpoint | undefined =
    path === "/v1/chat/completions" ? "chat" : path === "/v1/completions" ? "completions" : undefined;

  if (endpoint) {
    if (req.method !== "POST") return notAllowed(res);
    if (!admitRequest(ctx, res)) return;
    readBody(req, MAX_BODY_BYTES, (raw) => {
      if (raw === null) return sendError(res, 413, "request body too large", ctx.headers);
      handleInference(ctx, endpoint, req, res, raw);
    });
    return;
  }
  switch (path) {
    case "/health":
      return sendJson(res, 200, HEALTH_BODY, ctx.headers);
    case "/v1/models":
      return sendJson(res, 200, modelsBody, ctx.headers);
    case "/metrics":
      return sendMetrics(ctx, res);
    case "/sim/requests":
      if (req.method === "DELETE") {
        ctx.log.clear();
        res.writeHead(204, ctx.headers).end();
        return;
      }
      return sendJson(res, 200, JSON.stringify(ctx.log.list()), ctx.headers);
    default:
      res.writeHead(404, { ...ctx.headers, "content-type": "application/json" }).end('{"detail":"Not Found"}');
  }
}

/**
 * Counts the request toward dieAfterRequests. The Nth request is served, then the worker dies;
 * a request reaching a dying worker on an open keep-alive connection gets its socket cut.
 */
function admitRequest(ctx: WorkerContext, res: ServerResponse): boolean {
  if (ctx.dead) {
    res.destroy();
    return false;
  }
  const limit = ctx.config.faults.dieAfterRequests;
  ctx.accepted++;
  if (limit > 0 && ctx.accepted > limit) {
    res.destroy();
    return false;
  }
  if (limit > 0 && ctx.accepted === limit) res.once("close", () => ctx.die());
  return true;
}

function sendMetrics(ctx: WorkerContext, res: ServerResponse): void {
  const text = renderMetrics(ctx.config.index, ctx.config.servedModelName, ctx.counters, {
    running: ctx.scheduler.running,
    waiting: ctx.scheduler.waiting,
    kvBlocksUsed: ctx.scheduler.blocksInUse,
    kvBlocksCached: ctx.cache.size,
    kvBlocksCapacity: ctx.cache.capacity,
  });
  res.writeHead(200, { ...ctx.headers, "content-type": "text/plain; version=0.0.4; charset=utf-8" }).end(text);
}

function notAllowed(res: ServerResponse): void {
  res.writeHead(405, { "content-type": "application/json" }).end('{"detail":"Method Not Allowed"}');
}

function listeningPort(address: ReturnType<Server["address"]>): number {
  if (address === null || typeof address === "string") throw new Error(`unexpected server address ${String(address)}`);
  return address.port;
}
