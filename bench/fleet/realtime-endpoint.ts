import { STATUS_CODES, type IncomingMessage, type Server, type ServerOptions } from "node:http";
import { createRequire } from "node:module";
import type { Duplex } from "node:stream";
import { openAIError } from "./http-replies.ts";
import { runRealtimeSession } from "./realtime-session.ts";
import type { WorkerContext } from "./worker-context.ts";

const PATH = "/v1/realtime";

// Loaded by Node's own resolution: the Workers test project bundles its global setup (which starts
// a fleet) with the "browser" condition, under which the ws package is a stub that only throws.
const { WebSocketServer } = createRequire(import.meta.url)("ws") as typeof import("ws");

export interface RealtimeEndpoint {
  /** Cuts every open session (no close frame), as a worker's process going away does. */
  terminateAll(): void;
}

/**
 * A worker server's options: only a WebSocket upgrade reaches serveRealtime; any other Upgrade
 * offer is served as the HTTP/1.1 request it also is, as vLLM does (curl --http2 offers h2c on
 * every http:// request, /health and /v1/chat/completions included). shouldUpgradeCallback is in
 * the project's Node (22.23) but not yet in @types/node 22.20, hence the type.
 */
export const WORKER_SERVER_OPTIONS: ServerOptions & { shouldUpgradeCallback(req: IncomingMessage): boolean } = {
  shouldUpgradeCallback: (req) => req.headers.upgrade?.toLowerCase() === "websocket",
};

/**
 * GET /v1/realtime?model=M with Upgrade: websocket on a worker's server (created with
 * WORKER_SERVER_OPTIONS): a realtime session (realtime-session.ts) for the model it serves, the
 * `realtime` subprotocol chosen when offered. A WebSocket upgrade to any other path, or for
 * another model, gets the 404 a vLLM server answers. Each
 * handshake is logged like a request (GET /sim/requests), so a test sees what a gateway sent.
 */
export function serveRealtime(server: Server, ctx: WorkerContext): RealtimeEndpoint {
  const wss = new WebSocketServer({ noServer: true, handleProtocols: (offered) => (offered.has("realtime") ? "realtime" : false) });
  const headerLines = Object.entries(ctx.headers).map(([name, value]) => `${name}: ${value}`);
  wss.on("headers", (headers: string[]) => headers.push(...headerLines));
  const refuse = (socket: Duplex, status: number, body: string): void => refuseUpgrade(socket, status, body, headerLines);
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (ctx.dead) return void socket.destroy();
    // The target is the client's: `http://[` is no URL, and a throw here would end the process.
    const url = URL.parse(req.url ?? "/", "http://sim");
    if (url === null) return refuse(socket, 400, openAIError(400, `The request target ${JSON.stringify(req.url)} is not a URL.`));
    if (url.pathname !== PATH) return refuse(socket, 404, '{"detail":"Not Found"}');
    ctx.log.record({ at: Date.now(), path: req.url ?? "", headers: req.headers, body: null });
    const model = url.searchParams.get("model");
    if (model !== ctx.config.servedModelName) return refuse(socket, 404, openAIError(404, `The model \`${model ?? ""}\` does not exist.`, "model"));
    wss.handleUpgrade(req, socket, head, (ws) => runRealtimeSession(ctx, ws, model));
  });
  return {
    terminateAll: () => {
      for (const ws of wss.clients) ws.terminate();
    },
  };
}

/** An HTTP reply written on the upgrade's raw socket: `headerLines` are the worker's own (x-sim-worker). */
function refuseUpgrade(socket: Duplex, status: number, body: string, headerLines: readonly string[]): void {
  const lines = [`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}`, ...headerLines, "content-type: application/json", `content-length: ${Buffer.byteLength(body)}`, "connection: close"];
  const head = `${lines.join("\r\n")}\r\n\r\n`;
  // Node's server stops watching an upgraded socket: a client's reset (before or after it read the
  // refusal) is an 'error' on it, which with no listener would end the process.
  socket.on("error", () => {});
  socket.end(head + body);
}
