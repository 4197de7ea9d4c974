import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { readBody, sendError, sendJson } from "./http-replies.ts";
import { handleInference, type Endpoint } from "./inference-handler.ts";
import type { FaultEvent } from "./faults.ts";
import { PrefixCache } from "./kv-cache.ts";
import { renderMetrics } from "./metrics.ts";
import { serveRealtime, WORKER_SERVER_OPTIONS } from "./realtime-endpoint.ts";
import type { LoggedRequest } from "./request-log.ts";
import { BatchScheduler } from "./scheduler.ts";
import { createWorkerContext, type WorkerConfig, type WorkerContext } from "./worker-context.ts";

export const HOST = "127.0.0.1";
const MAX_BODY_BYTES = 64 * 1024 * 1024;
const HEALTH_BODY = '{"status":"ok"}';

export interface SimWorker {
  readonly url: string;
  readonly port: number;
  /** Starts the worker's fault clock (onsetMs, dieAtMs and flapping count from `at`, a Date.now()). */
  startFaults(at: number): void;
  /** The inference requests in its log, oldest first (also served at GET /sim/requests while it is up). */
  requests(): LoggedRequest[];
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

  const server = createServer(WORKER_SERVER_OPTIONS, (req, res) => route(ctx, req, res, modelsBody));
  const realtime = serveRealtime(server, ctx);
  // The fault clock's timers, apart from ctx.timers: a flap's down clears those, not these.
  const clock = new Set<NodeJS.Timeout>();
  const report = (kind: FaultEvent["kind"]): void => config.onFaultEvent?.(kind);
  let closed: Promise<void> | undefined;
  // Flap transitions run one after another: a down waits for the previous up to be listening.
  let lifecycle: Promise<void> = Promise.resolve();

  /** Stops the engine and cuts everything; resolves once the port is closed and every socket gone. */
  const closePort = (): Promise<void> => {
    ctx.scheduler.stop();
    for (const timer of ctx.timers) clearTimeout(timer);
    ctx.timers.clear();
    return new Promise<void>((resolve) => {
      // The callback runs once every connection is gone; closeAllConnections makes that now,
      // stalled streams and idle keep-alive sockets included. On a port a flap already closed
      // it reports ERR_SERVER_NOT_RUNNING, which is no failure here.
      server.close(() => resolve());
      server.closeAllConnections();
      // Upgraded sockets are no longer the server's connections: they are cut on their own.
      realtime.terminateAll();
    });
  };
  const shut = (): Promise<void> =>
    (closed ??= (async () => {
      ctx.dead = true;
      for (const timer of clock) clearTimeout(timer);
      clock.clear();
      await lifecycle;
      await closePort();
    })());
  ctx.die = () => {
    if (ctx.dead) return;
    report("dead");
    void shut();
  };

  const listen = (port: number): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ port, host: HOST }, () => {
        server.off("error", reject);
        resolve();
      });
    });
  await listen(config.port);
  const port = listeningPort(server.address());

  // A flap: the process is gone (connection refused), then back on the same port with a fresh
  // engine and an empty cache, as a supervisor restarts a crashed vLLM.
  const goDown = (): void => {
    lifecycle = lifecycle.then(async () => {
      if (ctx.dead) return;
      report("down");
      await closePort();
    });
  };
  const comeUp = (): void => {
    lifecycle = lifecycle.then(async () => {
      if (ctx.dead) return;
      ctx.cache = new PrefixCache(config.profile.kvCapacityBlocks);
      ctx.scheduler = new BatchScheduler(ctx.cost, config.profile, config.schedulingPolicy);
      try {
        await listen(port);
        report("up");
      } catch {
        // The port was taken while the worker was down: it stays dead, as a failed restart.
        ctx.die();
      }
    });
  };

  let started = false;
  const startFaults = (t0: number): void => {
    if (started || closed) return;
    started = true;
    const f = config.faults;
    // Each timer aims at its time on the clock, so a late one does not push the later ones back.
    const at = (clockMs: number, fn: () => void): void => {
      const timer = setTimeout(() => {
        clock.delete(timer);
        fn();
      }, Math.max(0, t0 + clockMs - Date.now()));
      clock.add(timer);
    };
    const flap = (cycle: number): void => {
      if (cycle >= f.flapCycles) return;
      const downAt = f.onsetMs + cycle * (f.flapDownMs + f.flapUpMs);
      at(downAt, goDown);
      at(downAt + f.flapDownMs, () => {
        comeUp();
        flap(cycle + 1);
      });
    };
    const onset = (): void => {
      ctx.faulty = true;
      ctx.cost.slowFactor = f.slowFactor;
      if (f.errorRate > 0 || f.stallRate > 0 || f.slowFactor !== 1 || f.flapCycles > 0) report("onset");
    };
    // The first flap starts from the onset: two timers aimed at the same time could fire in either
    // order (each's delay is taken a millisecond apart), and a down came before its onset.
    const begin = (): void => {
      onset();
      flap(0);
    };
    if (t0 + f.onsetMs <= Date.now()) begin();
    else at(f.onsetMs, begin);
    if (f.dieAtMs > 0) at(f.dieAtMs, () => ctx.die());
  };

  return { url: `http://${HOST}:${port}`, port, startFaults, requests: () => ctx.log.list(), close: shut };
}

/** The inference paths, as vLLM serves them (rerank and score at each path vLLM answers them on). */
const ENDPOINTS: ReadonlyMap<string, Endpoint> = new Map<string, Endpoint>([
  ["/v1/chat/completions", "chat"],
  ["/v1/completions", "completions"],
  ["/v1/responses", "responses"],
  ["/v1/embeddings", "embeddings"],
  ["/rerank", "rerank"],
  ["/v1/rerank", "rerank"],
  ["/v2/rerank", "rerank"],
  ["/score", "score"],
  ["/v1/score", "score"],
]);

function route(ctx: WorkerContext, req: IncomingMessage, res: ServerResponse, modelsBody: string): void {
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  const path = q === -1 ? url : url.slice(0, q);
  const endpoint = ENDPOINTS.get(path);

  if (endpoint) {
    if (req.method !== "POST") return notAllowed(ctx, res);
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

function notAllowed(ctx: WorkerContext, res: ServerResponse): void {
  res.writeHead(405, { ...ctx.headers, "content-type": "application/json" }).end('{"detail":"Method Not Allowed"}');
}

function listeningPort(address: ReturnType<Server["address"]>): number {
  if (address === null || typeof address === "string") throw new Error(`unexpected server address ${String(address)}`);
  return address.port;
}
